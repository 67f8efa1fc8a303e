"""NVML error translation and value normalisation (pure: no NVML library is loaded)."""

from __future__ import annotations

import pynvml
import pytest

from gpu_operator.gpu.backend import GpuError, GpuLostError, GpuNotFoundError, NotSupportedError
from gpu_operator.gpu.nvml_lib import bus_id, call, optional, text, translate


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, GpuNotFoundError),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, GpuNotFoundError),
        (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLostError),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, NotSupportedError),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, NotSupportedError),
        (pynvml.NVML_ERROR_NO_PERMISSION, GpuError),
    ],
)
def test_errors_map_to_project_errors_naming_the_call(code: int, kind: type[GpuError]) -> None:
    error = translate("nvmlDeviceGetSerial", pynvml.NVMLError(code), what="GPU 2")
    assert type(error) is kind
    assert str(error).startswith("nvmlDeviceGetSerial (GPU 2): ")
    assert f"[NVML error {code}]" in str(error)


def test_call_and_optional() -> None:
    def lost() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def unsupported() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    with pytest.raises(GpuLostError, match=r"^nvmlDeviceGetUUID: GPU is lost"):
        call("nvmlDeviceGetUUID", lost)
    assert optional("nvmlDeviceGetNumaNodeId", unsupported, default=-1) == -1
    with pytest.raises(GpuLostError):
        optional("nvmlDeviceGetNumaNodeId", lost, default=None)
    assert call("nvmlX", lambda a, b=0: a + b, 1, b=2) == 3


def test_strings_and_bus_ids() -> None:
    assert text(b"NVIDIA H100") == text("NVIDIA H100") == "NVIDIA H100"
    assert bus_id(b"0000:3b:00.0") == bus_id("00000000:3B:00.0") == "00000000:3B:00.0"
