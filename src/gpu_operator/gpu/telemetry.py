"""Which readings a GPU model can give beyond the basic ones, and the simulated values of those readings.

Real GPUs differ: HBM parts have a memory temperature sensor and remap rows (Ampere and later), GDDR
parts (L4, T4) do neither; GPM profiling metrics exist from Hopper on; NVLink counters only where the
model has NVLink. The simulated backend and the fake driver's config both take these facts from here, so
a simulated L4 leaves out the same series as a real one. A model missing from ``HBM_MODELS`` is a GDDR
part.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpu_operator.gpu.catalog import GpuModel

#: GPU models (catalog keys) with HBM memory.
HBM_MODELS = frozenset({"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"})
#: Architectures with NVML's GPU performance monitoring (GPM).
GPM_ARCHITECTURES = frozenset({"hopper", "blackwell", "rubin"})
#: The least time between two GPM samples that are compared: back to back, a real H200's made no sense.
GPM_MIN_INTERVAL_S = 0.1
#: NVML's clocks-event reason for an idle GPU (nvmlClocksEventReasonGpuIdle).
CLOCK_EVENT_GPU_IDLE = 0x1
#: Simulated PCIe traffic at full load (KB/s, NVML's unit), sent and received.
PCIE_FULL_KBPS = (8_000_000, 12_000_000)
#: Simulated profiling activity at full load, as fractions (see ``types.PROFILING_METRICS``).
PROFILE_AT_FULL_LOAD = {
    "graphics_active": 1.0,
    "sm_active": 0.9,
    "sm_occupancy": 0.5,
    "tensor_active": 0.4,
    "dram_active": 0.6,
    "fp64_active": 0.1,
    "fp32_active": 0.3,
    "fp16_active": 0.2,
}
#: The NVML call behind each reading (``Sample`` attribute, ``profiling.<metric>`` or identity), as the
#: NVML backend (``nvml_readings``, ``nvml``, ``nvml_health``) makes it.
NVML_SOURCES = {
    "sm_clock_mhz": "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
    "mem_clock_mhz": "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
    "temperature_c": "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
    "memory_temperature_c": "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
    "power_w": "nvmlDeviceGetPowerUsage (mW)",
    "total_energy_mj": "nvmlDeviceGetTotalEnergyConsumption",
    "pcie_replay_count": "nvmlDeviceGetPcieReplayCounter",
    "gpu_util_pct": "nvmlDeviceGetUtilizationRates (gpu)",
    "mem_copy_util_pct": "nvmlDeviceGetUtilizationRates (memory)",
    "enc_util_pct": "nvmlDeviceGetEncoderUtilization",
    "dec_util_pct": "nvmlDeviceGetDecoderUtilization",
    "last_xid": "nvmlEventSetWait_v2 (nvmlEventTypeXidCriticalError)",
    "fb_free_mib": "nvmlDeviceGetMemoryInfo_v2 (free)",
    "fb_used_mib": "nvmlDeviceGetMemoryInfo_v2 (used)",
    "fb_reserved_mib": "nvmlDeviceGetMemoryInfo_v2 (reserved)",
    "nvlink_bandwidth_total": "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX, all links)",
    "ecc_sbe_volatile": "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
    "ecc_dbe_volatile": "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    "vgpu_license_status": "nvmlDeviceGetVirtualizationMode, nvmlDeviceGetGridLicensableFeatures_v4",
    "remapped_rows_uncorrectable": "nvmlDeviceGetRemappedRows (uncorrectable)",
    "remapped_rows_correctable": "nvmlDeviceGetRemappedRows (correctable)",
    "row_remap_failure": "nvmlDeviceGetRemappedRows (failure occurred)",
    "clock_event_reasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "pcie_tx_bytes_per_s": "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES) x 1024",
    "pcie_rx_bytes_per_s": "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES) x 1024",
    "profiling.graphics_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL) / 100",
    "profiling.sm_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_UTIL) / 100",
    "profiling.sm_occupancy": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_OCCUPANCY) / 100",
    "profiling.tensor_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL) / 100",
    "profiling.dram_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL) / 100",
    "profiling.fp64_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_FP64_UTIL) / 100",
    "profiling.fp32_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_FP32_UTIL) / 100",
    "profiling.fp16_active": "GPM: nvmlGpmMetricsGet(NVML_GPM_METRIC_FP16_UTIL) / 100",
    "driver_version": "nvmlSystemGetDriverVersion",
    "device.name": "nvmlDeviceGetName",
    "device.serial": "nvmlDeviceGetSerial",
    "device.uuid": "nvmlDeviceGetUUID",
    "device.minor_number": "nvmlDeviceGetMinorNumber",
}
#: When a reading is absent (the GPU cannot give it).
ABSENT_WHEN = {
    "memory_temperature_c": "no memory sensor (GDDR parts)",
    "nvlink_bandwidth_total": "no NVLink",
    "vgpu_license_status": "not a vGPU guest",
    "remapped_rows_uncorrectable": "no row remapping (before Ampere, GDDR parts)",
    "remapped_rows_correctable": "no row remapping (before Ampere, GDDR parts)",
    "row_remap_failure": "no row remapping (before Ampere, GDDR parts)",
    **{f"profiling.{name}": "no GPM (before Hopper); MIG instances" for name in PROFILE_AT_FULL_LOAD},
}


@dataclass(frozen=True, kw_only=True)
class Telemetry:
    """The optional readings a model supports."""

    memory_sensor: bool
    row_remapping: bool
    gpm: bool
    nvlink: bool


@functools.cache  # read on every simulated reading; a model's facts never change
def telemetry_of(model: GpuModel) -> Telemetry:
    hbm = model.key in HBM_MODELS
    return Telemetry(
        memory_sensor=hbm, row_remapping=hbm, gpm=model.architecture in GPM_ARCHITECTURES, nvlink=model.nvlinks > 0
    )


def pcie_kbps(busy: float) -> tuple[int, int]:
    """Simulated PCIe throughput (tx, rx) in KB/s at load ``busy`` (0-1)."""
    return round(PCIE_FULL_KBPS[0] * busy), round(PCIE_FULL_KBPS[1] * busy)


def profiling(busy: float) -> dict[str, float]:
    """Simulated GPM metrics at load ``busy`` (0-1)."""
    return {name: round(full * busy, 6) for name, full in PROFILE_AT_FULL_LOAD.items()}
