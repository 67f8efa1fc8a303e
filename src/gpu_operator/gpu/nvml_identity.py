"""Identity facts NVML gives only through newer or optional calls: PCI class and NVLink-fabric clique.

Both feed GPU feature discovery (``nvidia.com/gpu.mode``, ``nvidia.com/gpu.clique``) and both are
optional: a driver or GPU that does not support the call gives None, and the label is left out (or,
for the mode, ``unknown``), never guessed. The fabric rule is go-nvlib's ``IsFabricAttached``: the
GPU's fabric registration has completed, successfully, with a cluster UUID that is not all zeros
(an HGX H100 behind NVSwitches completes registration with a zero UUID: not attached).
"""

from __future__ import annotations

import ctypes
import uuid
from types import ModuleType
from typing import Any

from gpu_operator.gpu.backend import NotSupportedError
from gpu_operator.gpu.nvml_lib import call


def pci_class(nv: ModuleType, handle: Any, *, what: str = "") -> int | None:
    """The GPU's 24-bit PCI class (``0x030200``) from ``nvmlDeviceGetPciInfoExt``; None if unsupported."""
    info = nv.nvmlPciInfoExt_v1_t()
    info.version = nv.nvmlPciInfoExt_v1
    try:
        call("nvmlDeviceGetPciInfoExt", nv.nvmlDeviceGetPciInfoExt, handle, ctypes.byref(info), what=what)
    except NotSupportedError:
        return None
    return (int(info.baseClass) & 0xFF) << 16 | (int(info.subClass) & 0xFF) << 8


def fabric_clique(nv: ModuleType, handle: Any, *, what: str = "") -> str | None:
    """``<cluster UUID>.<clique ID>`` when the GPU is attached to an NVLink fabric, else None."""
    info = nv.c_nvmlGpuFabricInfo_t()
    try:
        call("nvmlDeviceGetGpuFabricInfo", nv.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info), what=what)
    except NotSupportedError:
        return None
    cluster = bytes(info.clusterUuid)
    if int(info.state) != nv.NVML_GPU_FABRIC_STATE_COMPLETED or not any(cluster):
        return None
    if int(info.status) != nv.NVML_SUCCESS:
        return None
    return f"{uuid.UUID(bytes=cluster)}.{int(info.cliqueId)}"
