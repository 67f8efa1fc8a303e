"""Node agents III: time to apply a MIG change on an 8-GPU simulated node, and the toolkit's no-change run.

MIG: the MIG manager's reconfiguration (plan, pause and restore of the GPU clients' labels, mode
change with GPU resets, geometry) on 8-GPU simulated nodes, against an in-memory Node and without
waiting for pods (the wait is the clients' own shutdown time, not ours): wall and CPU time per
switch. Target from issue [6/9]: under 10 s; upstream mig-parted spent 42 s of CPU for 9 s of wall
time before its fix. The simulated GPUs change geometry instantly, so this is the agent's own cost.

Toolkit: one pass of the work a restarted toolkit repeats on an already configured node (install
the executables, edit containerd's default config, regenerate the CDI spec of an 8-GPU node), which
writes nothing; and the first, configuring, pass for comparison.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpu_operator.agents.migmanager.defaults import default_configs
from gpu_operator.agents.migmanager.program import BackendReset
from gpu_operator.agents.migmanager.reconfigure import Options, Reconfigure
from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend

MIG_NODES = {"dgx-h100": "all-1g.10gb", "dgx-a100": "all-1g.10gb", "hgx-h200": "all-1g.18gb"}
TOOLKIT_RUNS = 50
FALLBACK_CONTAINERD_CONFIG = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'


@dataclass
class MemoryNode:
    """NodeAccess in memory: the bench measures the agent, not an API server."""

    values: dict[str, str] = field(default_factory=dict)

    async def labels(self) -> dict[str, str]:
        return dict(self.values)

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        for key, value in changes.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value


async def _no_sleep(seconds: float | None) -> bool:
    await asyncio.sleep(0)
    return False


def _switch(work: Reconfigure, name: str) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    outcome = asyncio.run(work.run(name=name, configs=default_configs()))
    if outcome.state != "success":
        raise RuntimeError(f"MIG switch to {name} failed: {outcome.reason}")
    return time.perf_counter() - wall, time.process_time() - cpu


def measure_mig() -> dict[str, dict[str, float]]:
    # Without cluster access the agent warns on every switch that it is not waiting for pods: expected here.
    logging.getLogger("gpu_operator.agents.migmanager").setLevel(logging.ERROR)
    results = {}
    for profile, config in MIG_NODES.items():
        backend = SimulatedBackend(profile=node_profile(profile), node_name="bench")
        labels = {f"nvidia.com/gpu.deploy.{o}": "true" for o in ("device-plugin", "gpu-feature-discovery", "dcgm")}
        work = Reconfigure(
            node=MemoryNode(values=labels),
            cluster=None,
            backend=backend,
            reset=BackendReset(backend=backend, reset_gpu=backend.reset_gpu),
            options=Options(wait_timeout=0),
            sleep=_no_sleep,
            name="bench",
        )
        enable_wall, enable_cpu = _switch(work, config)
        balanced_wall, _ = _switch(work, "all-balanced")
        disable_wall, disable_cpu = _switch(work, "all-disabled")
        results[f"{profile} (8 GPUs): all-disabled -> {config} -> all-balanced -> all-disabled"] = {
            "enable_wall_s": enable_wall,
            "enable_cpu_s": enable_cpu,
            "balanced_wall_s": balanced_wall,
            "disable_wall_s": disable_wall,
            "disable_cpu_s": disable_cpu,
        }
    return results


@dataclass
class _Host:
    root: Path
    gpu: GpuBackend
    env: dict[str, str]
    node_name: str = "bench"
    node: None = None
    plugin_dir: Path = Path("/nonexistent")

    def path(self, container_path: str) -> Path:
        return self.root / "container" / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        pass

    async def sleep(self, seconds: float | None) -> bool:
        return True


def _default_config() -> str:
    try:
        return subprocess.run(["containerd", "config", "default"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return FALLBACK_CONTAINERD_CONFIG


def _pass(toolkit: Toolkit) -> tuple[float, bool]:
    start = time.perf_counter()
    changed = bool(toolkit.install()) | bool(toolkit.configure()) | toolkit.refresh_cdi()
    return time.perf_counter() - start, changed


def measure_toolkit() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tk-bench-", dir="/tmp") as tmp:
        host = _Host(
            root=Path(tmp), gpu=SimulatedBackend(profile=node_profile("dgx-h100")), env={"CDI_ENABLED": "true"}
        )
        config = host.host_path("/etc/containerd/config.toml")
        config.parent.mkdir(parents=True)
        config.write_text(_default_config())
        toolkit = Toolkit(ctx=host, settings=settings_from_env(host.env))
        first, changed = _pass(toolkit)
        assert changed, "the first pass must configure"
        runs = []
        for _ in range(TOOLKIT_RUNS):
            elapsed, changed = _pass(toolkit)
            if changed:
                raise RuntimeError("a no-change pass wrote something")
            runs.append(elapsed)
        return {
            "first_ms": first * 1000,
            "no_change_median_ms": statistics.median(runs) * 1000,
            "no_change_max_ms": max(runs) * 1000,
        }


def measure() -> dict[str, object]:
    return {"mig": measure_mig(), "toolkit": measure_toolkit()}


def markdown(results: dict[str, object]) -> str:
    mig = results["mig"]
    toolkit = results["toolkit"]
    assert isinstance(mig, dict)
    assert isinstance(toolkit, dict)
    lines = [
        "MIG change, excluding waits for pods (target < 10 s; upstream mig-parted before its fix: 9 s wall, 42 s CPU):",
        "",
        "| node and switch | enable wall s | enable CPU s | to balanced wall s | disable wall s | disable CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    keys = ["enable_wall_s", "enable_cpu_s", "balanced_wall_s", "disable_wall_s", "disable_cpu_s"]
    for node, figures in mig.items():
        lines.append(f"| {node} | " + " | ".join(f"{figures[k]:.3f}" for k in keys) + " |")
    lines += [
        "",
        f"Toolkit pass on a configured dgx-h100 node (containerd default config, CDI spec of 8 GPUs), "
        f"{TOOLKIT_RUNS} runs:",
        "",
        "| first (configuring) pass ms | no-change pass median ms | no-change pass max ms |",
        "|---:|---:|---:|",
        f"| {toolkit['first_ms']:.1f} | {toolkit['no_change_median_ms']:.1f} | {toolkit['no_change_max_ms']:.1f} |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(measure()))
