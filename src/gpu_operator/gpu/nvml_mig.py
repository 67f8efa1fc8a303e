"""MIG through NVML: mode, offered profiles, listing, and replacing the geometry of one GPU.

A MIG device here is one compute instance, as NVML lists MIG device handles and as the device plugin
and mig-parted count them: a GPU instance holds one compute instance spanning it (``3g.40gb``) or
several smaller ones (``1c.3g.40gb`` x 3). Profiles are read from NVML (version 1 of the profile info
structs: it carries everything needed and, unlike version 2, needs no struct version field) and
named with ``mig.profile_name``; a compute instance's size comes from its profile ID matched against
the profiles its GPU instance offers, as go-nvlib does. The requested layout is planned with
``mig.plan_geometry`` before anything is destroyed, so a bad request leaves the GPU as it was.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gpu_operator.gpu.backend import GpuError, GpuLostError, NotSupportedError
from gpu_operator.gpu.mig import device_profile, plan_geometry, profile_name, profile_order
from gpu_operator.gpu.mig_attributes import read_attributes
from gpu_operator.gpu.nvml_lib import call, text
from gpu_operator.gpu.types import MigDevice, MigProfile

# Compute-instance profile index for a GPU instance of n slices (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE).
_CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def mode(nv: ModuleType, index: int, handle: Any) -> tuple[int, int] | None:
    """(current, pending) MIG mode, or None when the GPU does not support MIG."""
    try:
        current, pending = call("nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode, handle, what=f"GPU {index}")
    except NotSupportedError:
        return None
    return int(current), int(pending)


def profiles(nv: ModuleType, index: int, handle: Any, total_mib: int) -> list[MigProfile]:
    """The GPU-instance profiles this GPU offers (empty if NVML lists none, e.g. with MIG off)."""
    out = []
    for nvml_profile in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = call(
                "nvmlDeviceGetGpuInstanceProfileInfo",
                nv.nvmlDeviceGetGpuInstanceProfileInfo,
                handle,
                nvml_profile,
                version=1,
                what=f"GPU {index}",
            )
        except GpuLostError:
            raise
        except GpuError:
            continue  # this profile index does not exist on this GPU
        if not info.instanceCount:
            continue
        out.append(
            MigProfile(
                name=profile_name(
                    slices=int(info.sliceCount),
                    memory_mib=int(info.memorySizeMB),
                    total_memory_mib=total_mib,
                    nvml_profile=nvml_profile,
                ),
                profile_id=int(info.id),
                slices=int(info.sliceCount),
                memory_mib=int(info.memorySizeMB),
                max_count=int(info.instanceCount),
                multiprocessors=int(info.multiprocessorCount),
                copy_engines=int(info.copyEngineCount),
                decoders=int(info.decoderCount),
                encoders=int(info.encoderCount),
                jpegs=int(info.jpegCount),
                ofas=int(info.ofaCount),
                nvml_profile=nvml_profile,
            )
        )
    return sorted(out, key=profile_order)


def set_mode(nv: ModuleType, index: int, handle: Any, *, enabled: bool) -> bool:
    """Request MIG mode ``enabled``; True while the change waits for a GPU reset."""
    if mode(nv, index, handle) is None:
        raise NotSupportedError(f"GPU {index} does not support MIG")
    wanted = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
    # The activation status says why a change did not apply (in use, reset required); the modes
    # read back afterwards say the same thing in a form that does not depend on the driver.
    call("nvmlDeviceSetMigMode", nv.nvmlDeviceSetMigMode, handle, wanted, what=f"GPU {index}")
    current, pending = mode(nv, index, handle) or (0, 0)
    return current != pending


def list_devices(nv: ModuleType, index: int, handle: Any, total_mib: int) -> list[MigDevice]:
    """The MIG devices of GPU ``index`` in NVML's order (empty when MIG is off)."""
    state = mode(nv, index, handle)
    if not state or not state[0]:
        return []
    where = f"GPU {index}"
    by_id = {p.profile_id: p for p in profiles(nv, index, handle, total_mib)}
    out: list[MigDevice] = []
    for slot in range(int(call("nvmlDeviceGetMaxMigDeviceCount", nv.nvmlDeviceGetMaxMigDeviceCount, handle))):
        try:
            mig = call("nvmlDeviceGetMigDeviceHandleByIndex", nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        except GpuLostError:
            raise
        except GpuError:
            continue  # no MIG device in this slot
        gi_id = int(call("nvmlDeviceGetGpuInstanceId", nv.nvmlDeviceGetGpuInstanceId, mig, what=where))
        ci_id = int(call("nvmlDeviceGetComputeInstanceId", nv.nvmlDeviceGetComputeInstanceId, mig, what=where))
        gpu_instance = call("nvmlDeviceGetGpuInstanceById", nv.nvmlDeviceGetGpuInstanceById, handle, gi_id)
        info = call("nvmlGpuInstanceGetInfo", nv.nvmlGpuInstanceGetInfo, gpu_instance, what=where)
        profile = by_id.get(int(info.profileId))
        fn = nv.nvmlGpuInstanceGetComputeInstanceById
        ci = call("nvmlGpuInstanceGetComputeInstanceById", fn, gpu_instance, ci_id, what=where)
        ci_info = call("nvmlComputeInstanceGetInfo", nv.nvmlComputeInstanceGetInfo, ci, what=where)
        size = _ci_slices(nv, gpu_instance, int(ci_info.profileId), where)
        name = f"profile-{int(info.profileId)}"
        if profile is not None:
            name = device_profile(compute=size or profile.slices, gi=profile)
        out.append(
            MigDevice(
                uuid=text(call("nvmlDeviceGetUUID", nv.nvmlDeviceGetUUID, mig, what=f"{where} MIG {slot}")),
                parent_index=index,
                profile=name,
                gi_id=gi_id,
                ci_id=ci_id,
                memory_mib=profile.memory_mib if profile else 0,
                index=len(out),
                attributes=read_attributes(nv, mig, what=f"{where} MIG {slot}"),
            )
        )
    return out


def _ci_slices(nv: ModuleType, gi: Any, profile_id: int, where: str) -> int:
    """The slices of compute-instance profile ``profile_id`` in GPU instance ``gi`` (0 if none matches)."""
    for _, info in _ci_profiles(nv, gi, where):
        if int(info.id) == profile_id:
            return int(info.sliceCount)
    return 0


def _ci_profiles(nv: ModuleType, gi: Any, where: str) -> list[tuple[int, Any]]:
    """(profile index, profile info) of every compute-instance profile GPU instance ``gi`` offers."""
    out: list[tuple[int, Any]] = []
    shared = nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    fn = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo
    for ci_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = call("nvmlGpuInstanceGetComputeInstanceProfileInfo", fn, gi, ci_index, shared, version=1)
        except GpuLostError:
            raise
        except GpuError:
            continue  # profile index not offered inside this GPU instance
        if info.instanceCount:
            out.append((ci_index, info))
    return out


def create(nv: ModuleType, index: int, handle: Any, total_mib: int, *, requested: Sequence[str]) -> list[MigDevice]:
    """Replace GPU ``index``'s MIG devices with one per requested profile name."""
    where = f"GPU {index}"
    state = mode(nv, index, handle)
    if state is None:
        raise NotSupportedError(f"{where} does not support MIG")
    if not state[0]:
        raise GpuError(f"{where}: MIG mode is disabled; enable it (and reset the GPU) first")
    available = profiles(nv, index, handle, total_mib)
    plans = plan_geometry(available=available, requested=requested, gpu=where)
    _destroy_all(nv, handle, available, where)
    try:
        for plan in plans:
            fn = nv.nvmlDeviceCreateGpuInstance
            gi = call("nvmlDeviceCreateGpuInstance", fn, handle, plan.profile.profile_id, what=where)
            for size in plan.compute:
                _create_ci(nv, gi, size=size, where=f"{where} {device_profile(compute=size, gi=plan.profile)}")
    except GpuLostError:
        raise
    except GpuError:
        # As mig-parted does: a half-made geometry is cleared, not left for the plugin to advertise.
        _destroy_all(nv, handle, available, where)
        raise
    return list_devices(nv, index, handle, total_mib)


def _create_ci(nv: ModuleType, gi: Any, *, size: int, where: str) -> None:
    ci_index = _CI_PROFILE_BY_SLICES.get(size)
    if ci_index is None:
        raise GpuError(f"{where}: no compute-instance profile has {size} slices")
    fn = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo
    shared = nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    ci_info = call("nvmlGpuInstanceGetComputeInstanceProfileInfo", fn, gi, ci_index, shared, version=1, what=where)
    fn = nv.nvmlGpuInstanceCreateComputeInstance
    call("nvmlGpuInstanceCreateComputeInstance", fn, gi, ci_info.id, what=where)


def _destroy_all(nv: ModuleType, handle: Any, available: Sequence[MigProfile], where: str) -> None:
    """Destroy every compute instance, then every GPU instance, of every profile."""
    for profile in available:
        instances = (nv.c_nvmlGpuInstance_t * profile.max_count)()
        count = ctypes.c_uint(0)
        fn = nv.nvmlDeviceGetGpuInstances
        call("nvmlDeviceGetGpuInstances", fn, handle, profile.profile_id, instances, ctypes.byref(count), what=where)
        for gi in instances[: count.value]:
            for ci in _compute_instances(nv, gi, where):
                call("nvmlComputeInstanceDestroy", nv.nvmlComputeInstanceDestroy, ci, what=where)
            call("nvmlGpuInstanceDestroy", nv.nvmlGpuInstanceDestroy, gi, what=where)


def _compute_instances(nv: ModuleType, gi: Any, where: str) -> list[Any]:
    out: list[Any] = []
    for _, info in _ci_profiles(nv, gi, where):
        array = (nv.c_nvmlComputeInstance_t * int(info.instanceCount))()
        count = ctypes.c_uint(0)
        fn = nv.nvmlGpuInstanceGetComputeInstances
        call("nvmlGpuInstanceGetComputeInstances", fn, gi, info.id, array, ctypes.byref(count), what=where)
        out.extend(array[: count.value])
    return out
