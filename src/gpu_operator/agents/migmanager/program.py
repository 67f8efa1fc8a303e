"""``gpu-operator agent mig-manager``: watch the node's ``nvidia.com/mig.config`` and apply it.

The label is read every ``MIG_POLL_INTERVAL`` seconds (2 s by default); a reconfiguration runs once at
start and whenever the value changes, or when the state says a previous run did not finish (``pending``,
``rebooting``: the agent was restarted or the node rebooted mid-way). At every pass, deploy labels a
crashed run left at ``paused-for-mig-change`` are restored first, so a node never stays wedged.

Configs come from ``CONFIG_FILE`` (a mounted ConfigMap, re-read before each run) or the default set.
A pending MIG mode change is applied by a GPU reset: ``nvidia-smi -r -i N`` in the driver root
(``NVIDIA_DRIVER_ROOT`` on the node: ``/`` for a host driver, ``/run/nvidia/driver`` for the driver
container's) on a real node, the backend's own reset on a simulated one; ``WITH_REBOOT=true`` allows a
reboot (in the host root) when a reset is not enough. ``MIG_WAIT_TIMEOUT`` (300 s) bounds the wait for
the GPU clients' pods to stop.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

from gpu_operator.agents.host import resolve_under
from gpu_operator.agents.migmanager.config import MigConfigError, MigConfigs, load
from gpu_operator.agents.migmanager.defaults import default_configs
from gpu_operator.agents.migmanager.reconfigure import (
    CONFIG_LABEL,
    STATE_LABEL,
    GpuReset,
    MigApplyError,
    Options,
    Reconfigure,
)
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.operands import MIG_PAUSE, paused, restore_changes
from gpu_operator.gpu.backend import GpuBackend, ResettableBackend
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
UNFINISHED = ("pending", "rebooting")


class HostReset:
    """Resets through the driver's ``nvidia-smi`` in its root, reboots through ``reboot`` in the host root."""

    def __init__(self, *, host_root: Path, driver_root: Path | None = None) -> None:
        self.host_root = host_root
        self.driver_root = driver_root or host_root

    def _run(self, root: Path, *command: str) -> None:
        result = subprocess.run(["chroot", str(root), *command], capture_output=True, text=True, timeout=300,
                                check=False)  # fmt: skip
        if result.returncode != 0:
            raise MigApplyError(f"{' '.join(command)} failed: {(result.stderr or result.stdout).strip()[:300]}")

    def reset(self, index: int) -> None:
        self._run(self.driver_root, "nvidia-smi", "-r", "-i", str(index))

    def reboot(self) -> None:
        self._run(self.host_root, "reboot")


class BackendReset:
    """A backend that can reset its GPUs itself (the simulated one); a reboot resets every GPU."""

    def __init__(self, *, backend: GpuBackend, reset_gpu: Callable[[int], None]) -> None:
        self.backend = backend
        self.reset_gpu = reset_gpu

    def reset(self, index: int) -> None:
        self.reset_gpu(index)

    def reboot(self) -> None:
        for device in self.backend.devices():
            self.reset_gpu(device.index)


def resetter(ctx: AgentContext) -> GpuReset:
    if isinstance(ctx.gpu, ResettableBackend):
        return BackendReset(backend=ctx.gpu, reset_gpu=ctx.gpu.reset_gpu)
    host_root = ctx.host_path("/")
    # The driver's root as the node has it, through the host root (its symlinks followed there).
    driver_root = resolve_under(host_root, ctx.env.get("NVIDIA_DRIVER_ROOT") or "/")
    return HostReset(host_root=host_root, driver_root=driver_root)


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def load_configs(ctx: AgentContext) -> MigConfigs:
    path = ctx.env.get("CONFIG_FILE", "")
    if not path:
        return default_configs()
    file = ctx.path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise MigConfigError(f"{path}: cannot be read: {error.strerror or error}") from error
    return load(text, source=path)


async def main(ctx: AgentContext) -> None:
    """Apply ``nvidia.com/mig.config`` whenever it changes, until stopped."""
    name = f"mig-manager[{ctx.node_name}]"
    if ctx.node is None:
        log.error("%s: no access to the Node: nothing to watch", name)
        await ctx.sleep(None)
        return
    node, cluster = ctx.node, cluster_of(ctx)
    options = Options(
        wait_timeout=float(ctx.env.get("MIG_WAIT_TIMEOUT", "300")),
        poll_interval=float(ctx.env.get("MIG_POLL_INTERVAL", "2")),
        with_reboot=_flag(ctx.env.get("WITH_REBOOT")),
    )
    work = Reconfigure(
        node=node, cluster=cluster, backend=ctx.gpu, reset=resetter(ctx), options=options, sleep=ctx.sleep, name=name
    )
    last: list[str] = []  # the config last applied (or given up on), so an unchanged label is not redone
    ctx.set_ready(True)

    async def round_() -> None:
        labels = await node.labels()
        if paused(labels, reason=MIG_PAUSE):
            log.warning("%s: restoring operands left paused by an unfinished run", name)
            await node.patch_labels(restore_changes(labels, reason=MIG_PAUSE))
        wanted = labels.get(CONFIG_LABEL, "")
        if wanted and (last[-1:] != [wanted] or labels.get(STATE_LABEL) in UNFINISHED):
            last[:] = [wanted]
            try:
                configs = await asyncio.to_thread(load_configs, ctx)
            except MigConfigError as error:
                await node.patch_labels({STATE_LABEL: "failed"})
                log.error("%s: %s", name, error)
            else:
                await work.run(name=wanted, configs=configs)

    # An API or GPU failure is logged, counted and retried by the runtime; the watch goes on.
    await every(name=name, seconds=options.poll_interval, work=round_, sleep=ctx.sleep)
