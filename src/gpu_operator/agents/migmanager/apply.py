"""Applying a planned MIG config to the GPUs: layout checks, MIG mode with GPU resets, then geometry.

What ``mig-parted assert``/``apply`` do for the MIG manager (operands.md §6, steps 2, 3, 5, 10 and 11),
on the GPU backend instead of a binary. A MIG mode change that waits for a reset is applied by
:class:`GpuReset` (``nvidia-smi -r`` on a node, the backend's own reset on a simulated one); a reset
that fails or does not take leaves the change pending, which :class:`RebootNeededError` reports so the
caller can reboot when ``WITH_REBOOT`` allows it. Geometry compares MIG devices (compute instances) by
profile name, ``1c.3g.40gb`` included.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from gpu_operator.agents.migmanager.config import Target
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.gpu.mig import plan_geometry
from gpu_operator.gpu.types import Device

log = logging.getLogger(__name__)


class GpuReset(Protocol):
    """What applies a pending MIG mode change: a GPU reset, or a reboot of the node."""

    def reset(self, index: int) -> None: ...

    def reboot(self) -> None: ...


class MigApplyError(Exception):
    """The config could not be applied; the message is the reason reported on the node."""


class RebootNeededError(MigApplyError):
    """A MIG mode change is still pending after the GPU reset."""


def check_layouts(devices: Sequence[Device], *, targets: Mapping[int, Target]) -> None:
    """MigApplyError unless every targeted GPU can take its layout (checked before anything is paused)."""
    for device in devices:
        target = targets.get(device.index)
        if target is None or not target.mig_enabled:
            continue
        if not device.mig_capable:
            raise MigApplyError(f"GPU {device.index} ({device.name}) does not support MIG")
        try:
            plan_geometry(available=device.mig_profiles, requested=target.profiles, gpu=f"GPU {device.index}")
        except GpuError as error:
            raise MigApplyError(str(error)) from error


def mode_change_needed(devices: Sequence[Device], targets: Mapping[int, Target]) -> bool:
    """Whether a targeted GPU's MIG mode differs from its target or waits for a reset (``assert --mode-only``)."""
    return any(
        d.mig_enabled != targets[d.index].mig_enabled or d.mig_pending
        for d in devices
        if d.index in targets and d.mig_capable
    )


def satisfied(backend: GpuBackend, targets: Mapping[int, Target]) -> bool:
    """Whether the GPUs already look as ``targets`` say (``mig-parted assert``)."""
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


def apply_mode(backend: GpuBackend, *, targets: Mapping[int, Target], reset: GpuReset) -> bool:
    """Set every targeted GPU's MIG mode, resetting GPUs whose change waits for it; True when any changed.

    RebootNeededError when a change is still pending afterwards (the reset failed or did not take).
    """
    changed = False
    failures: list[str] = []
    for device in backend.devices():
        target = targets.get(device.index)
        if target is None:
            continue
        if not device.mig_capable:
            if target.mig_enabled:
                raise MigApplyError(f"GPU {device.index} ({device.name}) does not support MIG")
            continue
        if device.mig_enabled == target.mig_enabled and not device.mig_pending:
            continue
        changed = True
        if backend.set_mig_mode(device.index, enabled=target.mig_enabled):
            try:
                reset.reset(device.index)
            except (MigApplyError, GpuError, OSError) as error:
                # Not fatal yet: what is still pending below decides, and a reboot may apply it.
                log.warning("GPU %d: reset failed: %s", device.index, error)
                failures.append(f"GPU {device.index}: {error}")
    pending = [d.index for d in backend.devices() if d.index in targets and d.mig_pending]
    if pending:
        why = f" (reset: {'; '.join(failures)})" if failures else ""
        raise RebootNeededError(f"MIG mode change on GPU {', '.join(map(str, pending))} still needs a reboot{why}")
    return changed


def apply_geometry(backend: GpuBackend, *, targets: Mapping[int, Target]) -> bool:
    """Create the MIG devices of every targeted MIG-enabled GPU that differs; True when any changed."""
    changed = False
    capable = {d.index for d in backend.devices() if d.mig_capable}
    for index, target in sorted(targets.items()):
        if not target.mig_enabled or index not in capable:
            continue
        if Counter(m.profile for m in backend.mig_devices(index)) != Counter(target.profiles):
            backend.create_mig_devices(index, profiles=list(target.profiles))
            changed = True
    return changed
