"""The driver manager's individual steps over one node (see ``manager`` for their order), and the choice of
the real or simulated driver host.

State shared by the steps: whether we paused operands and whether the cordon is ours. A cordon is
ours only if the node was schedulable when we cordoned it; we record that in an annotation, so that a
restarted driver manager lifts its own cordon and never one an admin set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpu_operator.agents.drivermanager.eviction import EvictionError, drain, evict_gpu_pods
from gpu_operator.agents.drivermanager.modules import DriverHost, HostDriver, ModuleError, SimulatedDriver, unload_all
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import NodeCluster
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.operands import (
    DRIVER_OPERANDS,
    DRIVER_PAUSE,
    Clock,
    apps_for,
    pause_changes,
    restore_changes,
    wait_for_pods_gone,
)
from gpu_operator.api.envtext import env_choice, env_duration, env_path
from gpu_operator.gpu.backend import LoadableBackend
from gpu_operator.names import keys

if TYPE_CHECKING:
    from gpu_operator.agents.drivermanager.manager import ManagerSettings

log = logging.getLogger(__name__)
CORDONED_ANNOTATION = keys.DRIVER_MANAGER_CORDONED
PID_FILE = "/run/nvidia/nvidia-driver.pid"
STATE_FILE = "/run/nvidia/nvidia-driver.state"
DRIVER_ROOT = "/run/nvidia/driver"


class DriverManagerError(Exception):
    """The driver manager could not make the node ready; the message is the reason it reports."""


class DriverManagerSettingsError(DriverManagerError, ConfigRefusedError):
    """A variable of the driver pod's environment it cannot use; one line naming it."""


MODULE_TYPES = ("open", "proprietary", "auto")  # upstream's KERNEL_MODULE_TYPE values
MAX_SIMULATED_LOAD_SECONDS = 600.0


def host_settings(env: Mapping[str, str]) -> tuple[float, str, str]:
    """(``SIMULATED_MODULE_LOAD_SECONDS``, ``DRIVER_RUNFILE_DIR``, ``KERNEL_MODULE_TYPE``) from ``env``;
    DriverManagerSettingsError naming the variable for a bad value."""
    try:
        load = env_duration(env, "SIMULATED_MODULE_LOAD_SECONDS", default=0.0, minimum=0.0,
                            maximum=MAX_SIMULATED_LOAD_SECONDS)  # fmt: skip
        runfiles = env_path(env, "DRIVER_RUNFILE_DIR", default="/drivers")
        module_type = env_choice(env, "KERNEL_MODULE_TYPE", default="open", choices=MODULE_TYPES)
    except ConfigRefusedError as error:
        raise DriverManagerSettingsError(str(error)) from None
    return 0.0 if load is None else load, runfiles, module_type


def driver_host(ctx: AgentContext, *, modprobe_root: str | None = None) -> DriverHost:
    """The simulated driver host when the GPU backend can load and unload itself, else the real one
    (loading modules from ``modprobe_root``, a container path, when given: the driver's exposed root)."""
    load_seconds, runfiles, module_type = host_settings(ctx.env)
    if isinstance(ctx.gpu, LoadableBackend):
        return SimulatedDriver(
            host_root=ctx.host_path("/"),
            set_present=ctx.gpu.set_present,
            set_version=ctx.gpu.set_driver_version,
            load_seconds=load_seconds,
        )
    return HostDriver(
        # The host's sysfs through the host root: the same kernel as the container's own /sys on a real
        # host, and the only view of a node's fake kernel (sim.fakedriver.container) on a test node.
        sys_root=ctx.host_path("/sys"),
        host_root=ctx.host_path("/"),
        runfile_dir=ctx.path(runfiles),
        module_type=module_type,
        modprobe_root=ctx.path(modprobe_root) if modprobe_root else None,
    )


class Steps:
    def __init__(
        self,
        *,
        ctx: AgentContext,
        cluster: NodeCluster,
        host: DriverHost,
        settings: ManagerSettings,
        clock: Clock = time.monotonic,
    ) -> None:
        self.ctx, self.cluster, self.host, self.settings, self.clock = ctx, cluster, host, settings, clock
        self.name = f"driver-manager[{ctx.node_name}]"
        self.drained = False

    async def host_driver_version(self) -> str | None:
        return await asyncio.to_thread(self.host.host_driver_version)

    async def nvidia_loaded(self) -> bool:
        return "nvidia" in await asyncio.to_thread(self.host.loaded)

    async def cleanup(self) -> None:
        """What a previous driver container leaves: its PID file and its exposed root."""
        self.ctx.path(PID_FILE).unlink(missing_ok=True)
        await asyncio.to_thread(self.host.release_root, self.ctx.path(DRIVER_ROOT))

    def _extra(self) -> list[str]:
        return [self.settings.custom_label] if self.settings.custom_label else []

    async def pause_operands(self) -> None:
        labels = (await self.cluster.node()).labels
        operands = [*DRIVER_OPERANDS, *self._extra()]
        changes = pause_changes(labels, operands=operands, reason=DRIVER_PAUSE)
        if changes:
            await self.cluster.patch_node(labels=changes)
        left = await wait_for_pods_gone(
            self.cluster,
            apps=apps_for(DRIVER_OPERANDS),
            timeout=self.settings.operand_wait,
            sleep=self.ctx.sleep,
            interval=self.settings.eviction.interval,
            clock=self.clock,
        )
        if left:
            raise DriverManagerError(
                f"operand pods still running after {self.settings.operand_wait:g} s: {', '.join(left)}"
            )

    async def digest_unchanged(self) -> bool:
        if not self.settings.digest or self.settings.force_reinstall:
            return False
        try:
            current = self.ctx.path(STATE_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False
        return current == self.settings.digest

    async def previous_driver_differs(self) -> bool:
        """Whether the last driver installed here (its digest in the state file) had another config."""
        try:
            previous = self.ctx.path(STATE_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False  # none since boot (the state lives under /run)
        return bool(previous) and (previous != self.settings.digest or self.settings.force_reinstall)

    async def cordon(self) -> None:
        node = await self.cluster.node()
        if node.unschedulable:
            return  # cordoned by someone else (or by us before a restart: the annotation says which)
        await self.cluster.patch_node(unschedulable=True, annotations={CORDONED_ANNOTATION: "true"})

    async def move_gpu_pods(self) -> None:
        await self.cordon()
        options = self.settings.eviction
        try:
            if options.gpu_pod_eviction:
                moved = await evict_gpu_pods(self.cluster, options=options, sleep=self.ctx.sleep, clock=self.clock)
                log.info("%s: evicted GPU pods %s", self.name, ", ".join(moved) or "(none)")
                return
        except EvictionError as error:
            if not options.auto_drain:
                raise
            log.warning("%s: %s; draining the node", self.name, error)
        await self._drain()

    async def _drain(self) -> None:
        options = self.settings.eviction
        moved = await drain(self.cluster, options=options, sleep=self.ctx.sleep, clock=self.clock)
        self.drained = True
        log.info("%s: drained %s", self.name, ", ".join(moved) or "(nothing)")

    async def unload(self, *, drain_on_busy: bool) -> None:
        try:
            unloaded = await asyncio.to_thread(unload_all, self.host)
        except ModuleError as error:
            if not drain_on_busy or self.drained:
                raise DriverManagerError(str(error)) from error
            log.warning("%s: %s; draining the node and retrying", self.name, error)
            await self.cordon()
            try:
                await self._drain()
            except EvictionError as drain_error:
                raise DriverManagerError(f"{error}; drain failed: {drain_error}") from drain_error
            try:
                unloaded = await asyncio.to_thread(unload_all, self.host)
            except ModuleError as again:
                raise DriverManagerError(str(again)) from again
        log.info("%s: unloaded %s", self.name, ", ".join(unloaded) or "nothing")

    async def finish(self) -> None:
        """Restore the operands and lift our cordon (idempotent; run on every outcome)."""
        node = await self.cluster.node()
        changes = restore_changes(node.labels, reason=DRIVER_PAUSE, extra=self._extra())
        ours = node.annotations.get(CORDONED_ANNOTATION) == "true"
        if changes or ours:
            await self.cluster.patch_node(
                labels=changes or None,
                unschedulable=False if ours else None,
                annotations={CORDONED_ANNOTATION: None} if ours else None,
            )
