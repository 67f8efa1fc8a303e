"""Starting, configuring, probing and stopping the driver's MPS control daemons.

Each MPS-shared resource gets its own daemon, told apart by its pipe directory: clients reach the daemon
whose ``CUDA_MPS_PIPE_DIRECTORY`` the plugin gave them (``<mpsRoot>/<resource>/pipe``). A daemon sees
only its resource's GPUs (``CUDA_VISIBLE_DEVICES``) and gives each client an equal share: an active
thread percentage of ``100 / replicas`` and a pinned memory limit of ``memory / replicas`` per GPU.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.shared.mpsready import READY_MARKER  # what the plugin waits for

log = logging.getLogger(__name__)
CONTROL = "nvidia-cuda-mps-control"
_TIMEOUT_S = 30


class MpsError(RuntimeError):
    """A daemon could not be started or configured; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class DaemonSpec:
    """What one resource's daemon serves."""

    resource: str
    replicas: int
    uuids: tuple[str, ...]
    memory_mib: tuple[int, ...]  # per GPU, in CUDA_VISIBLE_DEVICES order

    def directory(self, mps_root: Path) -> Path:
        return mps_root / self.resource

    def commands(self) -> list[str]:
        """The limits each client gets."""
        share = 100 // max(1, self.replicas)
        lines = [f"set_default_active_thread_percentage {share}"]
        lines += [f"set_default_device_pinned_mem_limit {i} {m // max(1, self.replicas)}M"
                  for i, m in enumerate(self.memory_mib)]  # fmt: skip
        return lines


def find_control(*, env: Mapping[str, str], host_root: Path, driver_root: str) -> Path:
    """The driver's ``nvidia-cuda-mps-control``: in the container (the runtime mounts the driver's tools)
    or else under the driver root on the host."""
    found = shutil.which(CONTROL, path=env.get("PATH") or os.defpath)
    if found:
        return Path(found)
    for folder in ("usr/bin", "usr/sbin", "bin"):
        candidate = host_root / driver_root.lstrip("/") / folder / CONTROL
        if candidate.is_file():
            return candidate
    raise MpsError(f"{CONTROL} not found on PATH nor under the driver root {driver_root} (is the driver installed?)")


def _env(spec: DaemonSpec, *, mps_root: Path) -> dict[str, str]:
    base = spec.directory(mps_root)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "CUDA_MPS_PIPE_DIRECTORY": str(base / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(base / "log"),
        "CUDA_VISIBLE_DEVICES": ",".join(spec.uuids),
    }


def _control(binary: Path, spec: DaemonSpec, *, mps_root: Path, lines: Sequence[str]) -> str:
    result = subprocess.run(
        [str(binary)],
        input="".join(f"{line}\n" for line in lines),
        env=_env(spec, mps_root=mps_root),
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise MpsError(f"{spec.resource}: {CONTROL} {lines[0].split()[0]}: {(result.stderr or result.stdout).strip()}")
    return result.stdout


def answers(binary: Path, spec: DaemonSpec, *, mps_root: Path) -> bool:
    """Whether the resource's daemon is up and answering."""
    try:
        _control(binary, spec, mps_root=mps_root, lines=["get_default_active_thread_percentage"])
    except (MpsError, OSError, subprocess.TimeoutExpired):
        return False
    return True


def start(binary: Path, spec: DaemonSpec, *, mps_root: Path) -> None:
    """Start the resource's daemon (unless one answers already), set its limits, then mark it ready."""
    base = spec.directory(mps_root)
    marker = base / READY_MARKER
    marker.unlink(missing_ok=True)
    for sub in ("pipe", "log"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    if not answers(binary, spec, mps_root=mps_root):
        result = subprocess.run([str(binary), "-d"], env=_env(spec, mps_root=mps_root), capture_output=True,
                                text=True, timeout=_TIMEOUT_S, check=False)  # fmt: skip
        if result.returncode != 0:
            raise MpsError(f"{spec.resource}: {CONTROL} -d failed: {(result.stderr or result.stdout).strip()}")
    _control(binary, spec, mps_root=mps_root, lines=spec.commands())
    marker.write_text(",".join(spec.uuids) + "\n", encoding="utf-8")
    log.info("MPS control daemon for %s ready: %d GPU(s), %d replicas each", spec.resource, len(spec.uuids),
             spec.replicas)  # fmt: skip


def stop(binary: Path, spec: DaemonSpec, *, mps_root: Path) -> None:
    """Withdraw the ready marker first (the plugin stops advertising), then tell the daemon to quit."""
    (spec.directory(mps_root) / READY_MARKER).unlink(missing_ok=True)
    try:
        _control(binary, spec, mps_root=mps_root, lines=["quit"])
    except (MpsError, OSError, subprocess.TimeoutExpired) as error:
        log.info("MPS control daemon for %s was not running: %s", spec.resource, error)
