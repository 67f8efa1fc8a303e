"""One MIG reconfiguration: the named config applied to the GPUs, with the GPU clients stopped meanwhile.

Sequence (operands.md §6): plan the config for this node's GPUs (an unknown name or a layout that
cannot fit fails before anything is touched); already applied means ``success`` at once; otherwise
record the selected config in the host's systemd override (if the host has one), state ``pending``,
deploy labels of the GPU clients paused (``paused-for-mig-change``), wait (bounded) for their pods to
go, stop the host GPU client services that run (with ``WITH_SHUTDOWN_HOST_GPU_CLIENTS``; the kubelet
too when the MIG mode changes), apply MIG mode (resetting GPUs whose change waits for a reset; with
``WITH_REBOOT``, state ``rebooting`` and a reboot when a reset is not enough) and then the geometry,
start the stopped services again, and finally ``success`` or ``failed``. With the policy's maintenance
windows (``MIG_MAINTENANCE_WINDOWS``, our extension) a change that is not yet applied waits, state
``pending`` and its reason saying when the next window opens, until one is open: it stops the GPU
clients, which is disruptive work. Whatever happens after the
pause, services and labels are restored in a ``finally`` and the reason of a failure is logged,
recorded on the Node and sent as an Event: the node is never left with its GPU clients stopped
(NVIDIA/gpu-operator#2833).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.migmanager.apply import (
    GpuReset,
    MigApplyError,
    RebootNeededError,
    apply_geometry,
    apply_mode,
    check_layouts,
    mode_change_needed,
    satisfied,
)
from gpu_operator.agents.migmanager.clients import HostServiceError, HostServices, start_services, stop_services
from gpu_operator.agents.migmanager.config import Entry, MigConfigError, Target, plan
from gpu_operator.agents.runtime import NodeAccess
from gpu_operator.agents.shared.cluster import NodeCluster
from gpu_operator.agents.shared.operands import (
    MIG_OPERANDS,
    MIG_PAUSE,
    Clock,
    Sleep,
    apps_for,
    pause_changes,
    restore_changes,
    wait_for_pods_gone,
)
from gpu_operator.api.windows import WindowSchedule
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.names import keys

__all__ = ["CONFIG_LABEL", "STATE_LABEL", "GpuReset", "HostClients", "MigApplyError", "Options", "Reconfigure"]

log = logging.getLogger(__name__)
CONFIG_LABEL = keys.MIG_CONFIG
STATE_LABEL = keys.MIG_CONFIG_STATE
REASON_ANNOTATION = keys.MIG_CONFIG_REASON
#: The reason of a change held for a maintenance window (state ``pending``; retried every poll).
WINDOW_WAIT = "waiting for a maintenance window"
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")


@dataclass(frozen=True, kw_only=True)
class Options:
    wait_timeout: float = 300.0  # per reconfiguration, for the GPU clients' pods to go
    poll_interval: float = 1.0
    with_reboot: bool = False
    host_settle: float = 30.0  # after stopping host services for a mode change, as the MIG manager waits
    windows: WindowSchedule | None = None  # the policy's maintenance windows: a change that pauses waits for one


@dataclass(frozen=True, kw_only=True)
class HostClients:
    """The host side of a reconfiguration (``WITH_SHUTDOWN_HOST_GPU_CLIENTS``)."""

    services: HostServices
    names: tuple[str, ...]  # from the GPU clients file
    kubelet: str = "kubelet.service"  # HOST_KUBELET_SYSTEMD_SERVICE: stopped too when the MIG mode changes
    state_file: Path | None = None  # the host's systemd override recording the selected config


@dataclass(frozen=True, kw_only=True)
class Outcome:
    state: str  # success, failed, rebooting, or pending (waiting for a maintenance window)
    reason: str = ""
    applied: bool = False  # GPUs were changed


class Reconfigure:
    """One reconfiguration of one node; ``run`` never raises for a failure, it reports it."""

    def __init__(
        self,
        *,
        node: NodeAccess,
        cluster: NodeCluster | None,
        backend: GpuBackend,
        reset: GpuReset,
        options: Options,
        sleep: Sleep,
        clock: Clock = time.monotonic,
        name: str = "mig-manager",
        host: HostClients | None = None,
        wall: Clock = time.time,
    ) -> None:
        self.node, self.cluster, self.backend, self.reset = node, cluster, backend, reset
        self.options, self.sleep, self.clock, self.name, self.host = options, sleep, clock, name, host
        self.wall = wall  # epoch seconds: when a maintenance window is open
        self._waiting = ""  # the window wait last reported, so an unchanged wait is not written again

    async def _state(self, state: str, reason: str = "") -> None:
        # The reason first: whoever sees the state label (the operator, a test, kubectl) finds the
        # reason that goes with it, never the previous one or none.
        if self.cluster is not None:
            await self.cluster.patch_node(annotations={REASON_ANNOTATION: reason or None})
        await self.node.patch_labels({STATE_LABEL: state})
        if self.cluster is not None and state in ("failed", "success"):
            await self.cluster.event(
                reason=f"MigConfig{state.capitalize()}", message=reason or state, warning=state == "failed"
            )

    def _window_wait(self) -> str:
        """Why the change must wait ("" when it may go now): it stops the GPU clients, which is disruptive
        work, and the policy's maintenance windows are all closed."""
        windows = self.options.windows
        why = windows.wait_reason(self.wall()) if windows is not None else ""
        return f"{WINDOW_WAIT}; {why}" if why else ""

    async def run(self, *, name: str, configs: Mapping[str, Sequence[Entry]]) -> Outcome:
        try:
            devices = await asyncio.to_thread(self.backend.devices)
            targets = plan(configs, name=name, devices=devices)
            check_layouts(devices, targets=targets)
            if await asyncio.to_thread(satisfied, self.backend, targets):
                self._waiting = ""
                await self._state("success")
                return Outcome(state="success")
            waiting = self._window_wait()
            if waiting:
                if waiting != self._waiting:
                    self._waiting = waiting
                    await self._state("pending", f"{CONFIG_LABEL}={name}: {waiting}")
                return Outcome(state="pending", reason=waiting)
            self._waiting = ""
            await asyncio.to_thread(self._persist, name)
        except (MigConfigError, MigApplyError, GpuError, HostServiceError, OSError) as error:
            return await self.fail(f"{CONFIG_LABEL}={name}: {error}")
        mode_change = mode_change_needed(devices, targets)
        await self._state("pending")
        outcome: Outcome
        stopped: list[str] = []
        try:
            await self._pause()
            stopped = await self._stop_host(mode_change=mode_change)
            outcome = await self._apply(name=name, targets=targets)
        except (MigApplyError, GpuError, HostServiceError) as error:
            outcome = Outcome(state="failed", reason=f"{CONFIG_LABEL}={name}: {error}")
        finally:
            # Always, even on a timeout, an API error or cancellation: never leave the clients stopped.
            restarted = await self._start_host(stopped)
            await self._restore()
        if outcome.state != "failed" and restarted:
            outcome = Outcome(state="failed", reason=f"{CONFIG_LABEL}={name}: {restarted}")
        if outcome.state == "failed":
            return await self.fail(outcome.reason)
        if self.cluster is not None:
            # The validator re-checks the node with the new geometry.
            for pod in await self.cluster.list_pods(selector="app=nvidia-operator-validator"):
                await self.cluster.delete_pod(namespace=pod.namespace, name=pod.name)
        await self._state(outcome.state, outcome.reason)
        log.info("%s: %s=%s applied", self.name, CONFIG_LABEL, name)
        return outcome

    async def fail(self, reason: str) -> Outcome:
        """Report a failure: logged, state ``failed``, the reason on the Node and in an Event."""
        log.error("%s: MIG reconfiguration failed: %s", self.name, reason)
        await self._state("failed", reason)
        return Outcome(state="failed", reason=reason)

    def _persist(self, name: str) -> None:
        """Record the config in the host's systemd override, where the host's MIG manager service reads it."""
        file = self.host.state_file if self.host else None
        if self.host is None or file is None or not file.is_file():
            return
        file.write_text(f'[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG={name}"\n', encoding="utf-8")
        self.host.services.daemon_reload()

    async def _pause(self) -> None:
        changes = pause_changes(await self.node.labels(), operands=MIG_OPERANDS, reason=MIG_PAUSE)
        if changes:
            await self.node.patch_labels(changes)
        if self.cluster is None:
            log.warning("%s: no cluster access: not waiting for GPU client pods to stop", self.name)
            return
        left = await wait_for_pods_gone(
            self.cluster,
            apps=apps_for(MIG_OPERANDS),
            timeout=self.options.wait_timeout,
            sleep=self.sleep,
            interval=self.options.poll_interval,
            clock=self.clock,
        )
        if left:
            raise MigApplyError(
                f"timed out after {self.options.wait_timeout:g} s waiting for GPU clients to stop: {', '.join(left)}"
            )
        for app in VALIDATOR_APPS:
            for pod in await self.cluster.list_pods(selector=f"app={app}"):
                await self.cluster.delete_pod(namespace=pod.namespace, name=pod.name)

    async def _stop_host(self, *, mode_change: bool) -> list[str]:
        if self.host is None:
            return []
        names = [*self.host.names, *([self.host.kubelet] if mode_change and self.host.kubelet else [])]
        stopped = await asyncio.to_thread(stop_services, self.host.services, names)
        if mode_change:
            # Give what was stopped time to let go of the GPUs before the mode change needs them idle.
            await self.sleep(self.options.host_settle)
        return stopped

    async def _start_host(self, stopped: Sequence[str]) -> str:
        """Start the stopped services again; the error, if any ("" when all started)."""
        if self.host is None or not stopped:
            return ""
        try:
            await asyncio.to_thread(start_services, self.host.services, stopped)
        except HostServiceError as error:
            return f"restarting host GPU clients: {error}"
        return ""

    async def _apply(self, *, name: str, targets: Mapping[int, Target]) -> Outcome:
        try:
            changed = await asyncio.to_thread(apply_mode, self.backend, targets=targets, reset=self.reset)
        except RebootNeededError:
            if not self.options.with_reboot:
                raise
            await self._state("rebooting")
            log.warning("%s: rebooting the node to apply the MIG mode of %s", self.name, name)
            await asyncio.to_thread(self.reset.reboot)
            # Only a simulated reboot returns: check that the mode took effect, as after a real one.
            devices = await asyncio.to_thread(self.backend.devices)
            if mode_change_needed(devices, targets):
                raise MigApplyError("MIG mode change did not take effect after rebooting") from None
            changed = True
        changed = await asyncio.to_thread(apply_geometry, self.backend, targets=targets) or changed
        return Outcome(state="success", applied=changed)

    async def _restore(self) -> None:
        changes = restore_changes(await self.node.labels(), reason=MIG_PAUSE)
        if changes:
            await self.node.patch_labels(changes)
