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
from collections import Counter
from collections.abc import Sequence

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
