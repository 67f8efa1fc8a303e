"""GPU feature discovery labels: a pure function from what the node's GPUs report to the label set.

Label names and value rules follow upstream GFD (see node-labels.md §6): product names sanitised,
``-SHARED`` for replicated GPUs that keep their name, family from compute capability, CUDA driver
and runtime versions, MIG capability and per-strategy MIG labels. The writer (feature file,
NodeFeature object or the Node itself) is chosen elsewhere; this module does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.gpu.types import Device, MigDevice
from gpu_operator.names.keys import GPU_DISCOVERED, GPU_PRESENT

PREFIX = "nvidia.com/"


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """Everything the labels depend on, read once from the GPU backend and the settings."""

    devices: Sequence[Device]
    mig: Mapping[int, Sequence[MigDevice]]
    driver_version: str
    cuda_version: tuple[int, int]
    machine: str = "unknown"
    mig_strategy: str = "none"
    sharing_mode: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    renamed: bool = False  # renameByDefault: the resource is advertised as <name>.shared
    timestamp: int | None = None


def sanitise(name: str) -> str:
    """Drop characters outside ``[A-Za-z0-9-_. ]`` and turn whitespace into ``-``."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return re.sub(r"\s+", "-", kept.strip())


def family(major: int, minor: int) -> str:
    """The architecture family upstream derives from a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell"}
    names |= {12: "blackwell", 13: "rubin"}
    return names.get(major, "undefined")


def _version_labels(view: NodeView) -> dict[str, str]:
    parts = view.driver_version.split(".")
    major, minor = parts[0], parts[1] if len(parts) > 1 else ""
    rev = parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = view.cuda_version
    return {
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": view.driver_version,
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
        "cuda.runtime-version.major": str(cuda_major),
        "cuda.runtime-version.minor": str(cuda_minor),
        "cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        "cuda.runtime.major": str(cuda_major),
        "cuda.runtime.minor": str(cuda_minor),
    }


def _sharing(view: NodeView) -> tuple[str, str]:
    if view.replicas > 1 and view.sharing_mode != "none":
        return str(view.replicas), view.sharing_mode
    return "1", "none"


def _full_gpu_labels(view: NodeView, first: Device, count: int) -> dict[str, str]:
    replicas, strategy = _sharing(view)
    product = sanitise(first.name)
    if replicas != "1" and not view.renamed:
        product += "-SHARED"
    major, minor = first.compute_capability
    labels = {
        "gpu.product": product,
        "gpu.count": str(count),
        "gpu.replicas": replicas,
        "gpu.sharing-strategy": strategy,
        "gpu.family": family(major, minor),
        "gpu.compute.major": str(major),
        "gpu.compute.minor": str(minor),
    }
    if first.memory_mib:
        labels["gpu.memory"] = str(first.memory_mib)
    return labels


def _slices(profile: str) -> str:
    match = re.match(r"^(\d+)g\.", profile)
    return match.group(1) if match else "0"


def _mig_profile_labels(
    prefix: str, model: str, profile: str, migs: Sequence[MigDevice], view: NodeView
) -> dict[str, str]:
    replicas, strategy = _sharing(view)
    return {
        f"{prefix}product": f"{sanitise(model)}-MIG-{profile}",
        f"{prefix}count": str(len(migs)),
        f"{prefix}memory": str(migs[0].memory_mib),
        f"{prefix}slices.gi": _slices(profile),
        f"{prefix}slices.ci": _slices(profile),
        f"{prefix}replicas": replicas,
        f"{prefix}sharing-strategy": strategy,
    }


def _mig_labels(view: NodeView, first: Device) -> dict[str, str]:
    enabled = [d for d in view.devices if d.mig_enabled]
    if not enabled or view.mig_strategy == "none":
        return {}
    migs = [m for d in enabled for m in view.mig.get(d.index, ())]
    if view.mig_strategy == "single":
        profiles = {m.profile for m in migs}
        if len(profiles) != 1 or len(enabled) != len(view.devices):
            invalid = f"{sanitise(first.name)}-MIG-INVALID"
            return {
                "gpu.product": invalid,
                "gpu.count": "0",
                "gpu.replicas": "0",
                "gpu.sharing-strategy": "",
                "gpu.memory": "0",
            }
        return _mig_profile_labels("gpu.", first.name, profiles.pop(), migs, view)
    out: dict[str, str] = {}
    for profile in sorted({m.profile for m in migs}):
        group = [m for m in migs if m.profile == profile]
        out |= _mig_profile_labels(f"mig-{profile}.", first.name, profile, group, view)
    return out


def compute_labels(view: NodeView) -> dict[str, str]:
    """The complete GFD label set (keys with the ``nvidia.com/`` prefix); empty without GPUs."""
    if not view.devices:
        return {}
    first = view.devices[0]
    same_model = [d for d in view.devices if d.name == first.name]
    labels: dict[str, str] = {
        "gpu.machine": sanitise(view.machine) or "unknown",
        "mig.capable": "true" if any(d.mig_capable for d in view.devices) else "false",
        "mps.capable": "true"
        if view.sharing_mode == "mps" and not any(d.mig_enabled for d in view.devices)
        else "false",
        "gpu.mode": "compute",
        "vgpu.present": "false",
    }
    if view.timestamp is not None:
        labels["gfd.timestamp"] = str(view.timestamp)
    labels |= _version_labels(view)
    labels |= _full_gpu_labels(view, first, len(same_model))
    if view.mig_strategy == "mixed":
        # MIG-enabled parents are not shared as whole GPUs in mixed mode.
        if all(d.mig_enabled for d in view.devices):
            labels["gpu.replicas"] = "0"
        labels |= _mig_labels(view, first)
    else:
        labels |= _mig_labels(view, first)
    return {PREFIX + k: v for k, v in labels.items()}


def stale_keys(*, current: Mapping[str, str], computed: Mapping[str, str]) -> list[str]:
    """GFD-owned labels on the node that the hardware no longer justifies (to remove)."""
    owned = ("gpu.", "mig-", "cuda.", "mig.capable", "mps.capable", "vgpu.", "gfd.")
    return sorted(
        k
        for k in current
        if k.startswith(PREFIX)
        and k[len(PREFIX) :].startswith(owned)
        and k not in computed
        and k not in _OTHER_WRITERS
        and not k.startswith((PREFIX + "gpu.deploy.", PREFIX + "gpu.workload"))
    )


#: Labels in GFD's ``gpu.`` family that other writers own: the operator's and the discovery agent's.
_OTHER_WRITERS = frozenset({GPU_PRESENT, GPU_DISCOVERED})
