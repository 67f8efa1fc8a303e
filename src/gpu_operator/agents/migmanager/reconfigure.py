"""One MIG reconfiguration: the named config applied to the GPUs, with the GPU clients stopped meanwhile.

Sequence (operands.md §6): plan the config for this node's GPUs (an unknown name or a layout that
cannot fit fails before anything is touched); already applied means ``success`` at once; otherwise
state ``pending``, deploy labels of the GPU clients paused (``paused-for-mig-change``), wait (bounded)
for their pods to go, apply MIG mode (resetting GPUs whose change waits for a reset; with
``WITH_REBOOT``, state ``rebooting`` and a reboot when a reset is not enough) and then the geometry,
and finally ``success`` or ``failed``. Whatever happens after the pause, the labels are restored in a
``finally`` and the reason of a failure is logged, recorded on the Node and sent as an Event: the node
is never left with its GPU clients paused (NVIDIA/gpu-operator#2833).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu_operator.agents.migmanager.config import PROFILE, Entry, MigConfigError, Target, plan
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
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.gpu.mig import validate_geometry
from gpu_operator.gpu.types import Device
from gpu_operator.names import keys

log = logging.getLogger(__name__)
CONFIG_LABEL = keys.MIG_CONFIG
STATE_LABEL = keys.MIG_CONFIG_STATE
REASON_ANNOTATION = keys.MIG_CONFIG_REASON
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")


class GpuReset(Protocol):
    """What applies a pending MIG mode change: a GPU reset, or a reboot of the node."""

    def reset(self, index: int) -> None: ...

    def reboot(self) -> None: ...


class MigApplyError(Exception):
    """The config could not be applied; the message is the reason reported on the node."""


class RebootNeededError(MigApplyError):
    """A MIG mode change is still pending after the GPU reset."""


@dataclass(frozen=True, kw_only=True)
class Options:
    wait_timeout: float = 300.0  # per reconfiguration, for the GPU clients' pods to go
    poll_interval: float = 1.0
    with_reboot: bool = False


@dataclass(frozen=True, kw_only=True)
class Outcome:
    state: str  # success, failed or rebooting
    reason: str = ""
    applied: bool = False  # GPUs were changed


def check_layouts(devices: Sequence[Device], *, targets: Mapping[int, Target]) -> None:
    """MigApplyError unless every targeted GPU can take its layout (checked before anything is paused)."""
    for device in devices:
        target = targets.get(device.index)
        if target is None or not target.mig_enabled:
            continue
        if not device.mig_capable:
            raise MigApplyError(f"GPU {device.index} ({device.name}) does not support MIG")
        unsupported = [p for p in target.profiles if (m := PROFILE.match(p)) and m.group(1)]
        if unsupported:
            raise MigApplyError(
                f"GPU {device.index}: compute-instance profiles are not supported: {', '.join(unsupported)}"
            )
        try:
            validate_geometry(available=device.mig_profiles, requested=target.profiles, gpu=f"GPU {device.index}")
        except GpuError as error:
            raise MigApplyError(str(error)) from error


def _satisfied(backend: GpuBackend, targets: Mapping[int, Target]) -> bool:
    for device in backend.devices():
        target = targets.get(device.index)
        if target is None or (not device.mig_capable and not target.mig_enabled):
            continue
        if device.mig_enabled != target.mig_enabled or device.mig_pending:
            return False
        current = Counter(m.profile for m in backend.mig_devices(device.index))
        if target.mig_enabled and current != Counter(target.profiles):
            return False
    return True


def apply_targets(backend: GpuBackend, *, targets: Mapping[int, Target], reset: GpuReset) -> bool:
    """Apply mode, then geometry, to every targeted GPU; True when anything changed (MigApplyError on failure)."""
    changed = False
    devices = {d.index: d for d in backend.devices()}
    for index, target in sorted(targets.items()):
        device = devices[index]
        if not device.mig_capable:
            if target.mig_enabled:
                raise MigApplyError(f"GPU {index} ({device.name}) does not support MIG")
            continue
        if device.mig_enabled != target.mig_enabled or device.mig_pending:
            changed = True
            if backend.set_mig_mode(index, enabled=target.mig_enabled):
                reset.reset(index)
    pending = [d.index for d in backend.devices() if d.index in targets and d.mig_pending]
    if pending:
        raise RebootNeededError(f"MIG mode change on GPU {', '.join(map(str, pending))} still needs a reboot")
    for index, target in sorted(targets.items()):
        if not target.mig_enabled or not devices[index].mig_capable:
            continue
        if Counter(m.profile for m in backend.mig_devices(index)) != Counter(target.profiles):
            backend.create_mig_devices(index, profiles=list(target.profiles))
            changed = True
    return changed


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
    ) -> None:
        self.node, self.cluster, self.backend, self.reset = node, cluster, backend, reset
        self.options, self.sleep, self.clock, self.name = options, sleep, clock, name

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

    async def run(self, *, name: str, configs: Mapping[str, Sequence[Entry]]) -> Outcome:
        try:
            devices = await asyncio.to_thread(self.backend.devices)
            targets = plan(configs, name=name, devices=devices)
            check_layouts(devices, targets=targets)
            if await asyncio.to_thread(_satisfied, self.backend, targets):
                await self._state("success")
                return Outcome(state="success")
        except (MigConfigError, MigApplyError, GpuError) as error:
            return await self._fail(f"{CONFIG_LABEL}={name}: {error}")
        await self._state("pending")
        outcome: Outcome
        try:
            await self._pause()
            outcome = await self._apply(name=name, targets=targets)
        except (MigApplyError, GpuError) as error:
            outcome = Outcome(state="failed", reason=f"{CONFIG_LABEL}={name}: {error}")
        finally:
            # Always, even on a timeout, an API error or cancellation: never leave the clients paused.
            await self._restore()
        if outcome.state == "failed":
            return await self._fail(outcome.reason)
        if self.cluster is not None:
            # The validator re-checks the node with the new geometry.
            for pod in await self.cluster.list_pods(selector="app=nvidia-operator-validator"):
                await self.cluster.delete_pod(namespace=pod.namespace, name=pod.name)
        await self._state(outcome.state, outcome.reason)
        log.info("%s: %s=%s applied", self.name, CONFIG_LABEL, name)
        return outcome

    async def _fail(self, reason: str) -> Outcome:
        log.error("%s: MIG reconfiguration failed: %s", self.name, reason)
        await self._state("failed", reason)
        return Outcome(state="failed", reason=reason)

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

    async def _apply(self, *, name: str, targets: Mapping[int, Target]) -> Outcome:
        try:
            changed = await asyncio.to_thread(apply_targets, self.backend, targets=targets, reset=self.reset)
        except RebootNeededError:
            if not self.options.with_reboot:
                raise
            await self._state("rebooting")
            log.warning("%s: rebooting the node to apply the MIG mode of %s", self.name, name)
            await asyncio.to_thread(self.reset.reboot)
            # Only a simulated reboot returns: check that the mode took effect, as after a real one.
            if not await asyncio.to_thread(_satisfied_mode, self.backend, targets):
                raise MigApplyError("MIG mode change did not take effect after rebooting") from None
            changed = await asyncio.to_thread(apply_targets, self.backend, targets=targets, reset=self.reset)
        return Outcome(state="success", applied=changed)

    async def _restore(self) -> None:
        changes = restore_changes(await self.node.labels(), reason=MIG_PAUSE)
        if changes:
            await self.node.patch_labels(changes)


def _satisfied_mode(backend: GpuBackend, targets: Mapping[int, Target]) -> bool:
    return all(
        d.mig_enabled == targets[d.index].mig_enabled and not d.mig_pending
        for d in backend.devices()
        if d.index in targets and d.mig_capable
    )
