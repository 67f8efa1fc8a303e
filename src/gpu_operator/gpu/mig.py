"""MIG rules shared by the backends: profile names from NVML's numbers, and geometry validation.

NVML describes a GPU-instance profile by slice count, memory and a profile index, not by the name
(``1g.10gb``) that mig-parted configs, resource names and labels use. ``profile_name`` derives that
name the way NVIDIA's tools do: the memory is rounded up to eighths of the whole GPU and scaled by the
GPU's size in GB, so a 9984 MiB slice of an 80 GB H100 is ``10gb``. ``validate_geometry`` checks a
requested layout against the offered profiles before any backend touches the GPU, so the simulated
and the NVML backends reject the same layouts with the same messages.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_operator.gpu.backend import GpuError
from gpu_operator.gpu.types import MigProfile

# NVML profile indices (NVML_GPU_INSTANCE_PROFILE_*) whose name carries an attribute suffix.
_SUFFIX_BY_NVML_PROFILE = {
    0x7: "+me",  # 1 slice, REV1: with media extensions
    0xA: "+gfx",
    0xB: "+gfx",
    0xC: "+gfx",
    0xD: "-me",  # without media extensions
    0xE: "-me",
    0xF: "+me.all",
    0x10: "+me.all",
    0x11: "+gfx",
}

_EIGHTHS = 8


def profile_name(*, slices: int, memory_mib: int, total_memory_mib: int, nvml_profile: int = -1) -> str:
    """``<slices>g.<GB>gb[+attr]`` for a GPU-instance profile of a GPU with ``total_memory_mib``."""
    fraction = math.ceil(memory_mib / total_memory_mib * _EIGHTHS) / _EIGHTHS
    total_gb = math.ceil(total_memory_mib / 1024)
    gigabytes = math.floor(fraction * total_gb + 0.5)  # half away from zero, not banker's rounding
    return f"{slices}g.{gigabytes}gb{_SUFFIX_BY_NVML_PROFILE.get(nvml_profile, '')}"


def profile_order(profile: MigProfile) -> tuple[int, int, int]:
    """The order every backend lists profiles in: smallest first, plain before attributed variants."""
    return profile.slices, profile.memory_mib, profile.nvml_profile


def validate_geometry(*, available: Sequence[MigProfile], requested: Sequence[str], gpu: str) -> list[MigProfile]:
    """The profiles to create for ``requested``, largest first, or GpuError saying why it cannot fit.

    The capacity is the largest profile (the whole GPU): its compute slices and its memory. Real
    placement rules are finer than this sum test, but every layout that passes it and stays within
    each profile's instance count is one that mig-parted's published configs use.
    """
    by_name = {p.name: p for p in available}
    if not by_name:
        raise GpuError(f"{gpu}: no MIG profiles are known for this GPU")
    unknown = [name for name in requested if name not in by_name]
    if unknown:
        offered = ", ".join(sorted(by_name, key=lambda n: (by_name[n].slices, by_name[n].memory_mib, n)))
        raise GpuError(f"{gpu}: unknown MIG profile {', '.join(map(repr, unknown))}; this GPU offers {offered}")
    counts = Counter(requested)
    for name, count in counts.items():
        if count > by_name[name].max_count:
            raise GpuError(f"{gpu}: {count} x {name} requested, at most {by_name[name].max_count} fit")
    whole = max(available, key=lambda p: (p.slices, p.memory_mib))
    chosen = [by_name[name] for name in requested]
    slices = sum(p.slices for p in chosen)
    if slices > whole.slices:
        raise GpuError(f"{gpu}: {' + '.join(requested)} needs {slices} compute slices, the GPU has {whole.slices}")
    memory = sum(p.memory_mib for p in chosen)
    if memory > whole.memory_mib:
        raise GpuError(
            f"{gpu}: {' + '.join(requested)} needs {memory} MiB of MIG memory, the GPU has {whole.memory_mib} MiB"
        )
    # Largest first: NVML places big instances more easily on an empty GPU, so both backends use this order.
    return sorted(chosen, key=lambda p: (-p.slices, -p.memory_mib))


# Compute-instance sizes NVML has profiles for (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE).
CI_SIZES = (1, 2, 3, 4, 6, 7, 8)
_COMPUTE = re.compile(r"^(\d+)c\.(\d+)g\.(.+)$")


@dataclass(frozen=True, kw_only=True)
class GpuInstancePlan:
    """One GPU instance to create and the sizes (in slices) of the compute instances to create in it."""

    profile: MigProfile
    compute: tuple[int, ...]


def split_profile(name: str) -> tuple[int | None, str]:
    """(compute slices, GPU-instance profile) of a MIG device profile: ``1c.3g.40gb`` -> ``(1, "3g.40gb")``.

    The compute slices are None when the name has no ``<c>c.`` prefix (the instance spans the GPU
    instance). ``3c.3g.40gb`` is the same device as ``3g.40gb``, as in mig-parted.
    """
    match = _COMPUTE.match(name)
    if not match:
        return None, name
    compute, slices = int(match.group(1)), int(match.group(2))
    gi_name = f"{slices}g.{match.group(3)}"
    return (None if compute == slices else compute), gi_name


def device_profile(*, compute: int, gi: MigProfile) -> str:
    """The name of a compute instance of ``compute`` slices in a GPU instance of profile ``gi``."""
    return gi.name if compute == gi.slices else f"{compute}c.{gi.name}"


def canonical_profile(name: str) -> str:
    """``3g.40gb`` for ``3c.3g.40gb``; other names unchanged."""
    compute, gi_name = split_profile(name)
    return gi_name if compute is None else name


def plan_geometry(*, available: Sequence[MigProfile], requested: Sequence[str], gpu: str) -> list[GpuInstancePlan]:
    """The GPU instances (largest first) and their compute instances for ``requested``, or GpuError.

    Packing follows mig-parted: the devices are ordered by GPU-instance size, then compute-instance
    size, largest first, and a device goes into the GPU instance created just before it when that is
    of the same profile and still has room; otherwise it gets a GPU instance of its own. So
    ``1c.3g.40gb`` x 3 is one ``3g.40gb`` with three one-slice compute instances, and x 4 is two.
    """
    by_name = {p.name: p for p in available}
    split = [split_profile(name) for name in requested]
    if any(gi_name not in by_name for _, gi_name in split):
        validate_geometry(available=available, requested=[gi_name for _, gi_name in split], gpu=gpu)  # says which
    parsed: list[tuple[int, str]] = []
    for name, (compute, gi_name) in zip(requested, split, strict=True):
        gi = by_name[gi_name]
        if compute is None:
            parsed.append((gi.slices, gi_name))
            continue
        # mig-parted's rule for the compute instances a GPU instance offers: no larger than it, and
        # either all of it or at most about half of it.
        if compute not in CI_SIZES or compute > gi.slices or (compute < gi.slices and 2 * compute > gi.slices + 1):
            raise GpuError(
                f"{gpu}: {name}: a {gi.slices}-slice GPU instance offers no {compute}-slice compute instance"
            )
        parsed.append((compute, gi_name))
    order = sorted(parsed, key=lambda item: (-by_name[item[1]].slices, item[1], -item[0]))
    groups: list[tuple[str, list[int]]] = []
    for compute, gi_name in order:
        last = groups[-1] if groups else None
        if last is not None and last[0] == gi_name and sum(last[1]) + compute <= by_name[gi_name].slices:
            last[1].append(compute)
        else:
            groups.append((gi_name, [compute]))
    validate_geometry(available=available, requested=[name for name, _ in groups], gpu=gpu)
    plans = [GpuInstancePlan(profile=by_name[name], compute=tuple(sizes)) for name, sizes in groups]
    # The largest-first order validate_geometry gives (a stable sort: compute instances stay together).
    return sorted(plans, key=lambda p: (-p.profile.slices, -p.profile.memory_mib))
