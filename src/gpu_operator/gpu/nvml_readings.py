"""Readings for the NVML backend: one ``Sample`` per GPU, each value from the NVML call that gives it.

``gpu.telemetry.NVML_SOURCES`` names the call behind each reading
(``docs/reference/exporter-fields.md`` is generated from it). A call a GPU does not support leaves
its attribute ``None`` (the exporter then leaves the series out), never a made-up 0.
GPM metrics compare two GPM samples, so they appear from the second reading on. Two samples taken
back to back give nonsense (a real H200 said its DRAM was 100 % busy at idle), so a new sample is
taken only once ``GPM_MIN_INTERVAL_S`` has passed; a reading before that repeats the last metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpu_operator.gpu.backend import GpuError, GpuLostError
from gpu_operator.gpu.nvml_lib import call, field_values, nvml, optional
from gpu_operator.gpu.telemetry import GPM_MIN_INTERVAL_S
from gpu_operator.gpu.types import Sample

if TYPE_CHECKING:
    from gpu_operator.gpu.nvml import NvmlBackend

_MIB = 1 << 20
_ALL_LINKS = 0xFFFFFFFF  # a field value's scopeId that sums an NVLink counter over every link
# GPM metric id (NVML_GPM_METRIC_*) of each PROFILING_METRICS name; GPM reports percent.
_GPM_METRICS = {
    "graphics_active": 1,
    "sm_active": 2,
    "sm_occupancy": 3,
    "tensor_active": 5,
    "dram_active": 10,
    "fp64_active": 11,
    "fp32_active": 12,
    "fp16_active": 13,
}


class Readings:
    """Reads samples for one NvmlBackend and keeps each GPU's previous GPM sample."""

    def __init__(self, backend: NvmlBackend, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._backend = backend
        self._nv = nvml()
        self._clock = clock
        self._lock = threading.Lock()
        self._gpm: dict[str, Any] = {}  # uuid -> the previous GPM sample, or None without GPM support
        self._gpm_taken: dict[str, float] = {}  # uuid -> when that sample was taken (clock seconds)
        self._gpm_last: dict[str, dict[str, float]] = {}  # uuid -> the metrics computed with it
        self._nvlink_ids = (
            self._nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            self._nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        )

    def reading(self, index: int, handle: Any, *, last_xid: Callable[[str], int]) -> Sample:
        nv, where = self._nv, f"GPU {index}"
        uuid = self._backend.uuid(index, handle)
        util = optional("nvmlDeviceGetUtilizationRates", nv.nvmlDeviceGetUtilizationRates, handle, default=None)
        enc = optional("nvmlDeviceGetEncoderUtilization", nv.nvmlDeviceGetEncoderUtilization, handle, default=[0])
        dec = optional("nvmlDeviceGetDecoderUtilization", nv.nvmlDeviceGetDecoderUtilization, handle, default=[0])
        total, used, free, reserved = self._memory(handle, where)
        power_mw = optional("nvmlDeviceGetPowerUsage", nv.nvmlDeviceGetPowerUsage, handle, default=0)
        energy = optional(
            "nvmlDeviceGetTotalEnergyConsumption", nv.nvmlDeviceGetTotalEnergyConsumption, handle, default=0
        )
        clocks = nv.nvmlDeviceGetClockInfo
        temp = optional(
            "nvmlDeviceGetTemperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU, default=0
        )
        replays = optional("nvmlDeviceGetPcieReplayCounter", nv.nvmlDeviceGetPcieReplayCounter, handle, default=0)
        rows = optional("nvmlDeviceGetRemappedRows", nv.nvmlDeviceGetRemappedRows, handle, default=None)
        # One field-value call: memory temperature for the GPU, NVLink throughput summed over all links.
        fields = field_values(handle, [(nv.NVML_FI_DEV_MEMORY_TEMP, 0), *((f, _ALL_LINKS) for f in self._nvlink_ids)])
        return Sample(
            uuid=uuid,
            gpu_util_pct=float(util.gpu) if util is not None else 0.0,
            mem_copy_util_pct=float(util.memory) if util is not None else 0.0,
            enc_util_pct=float(enc[0]),
            dec_util_pct=float(dec[0]),
            fb_used_mib=used,
            fb_free_mib=free,
            fb_reserved_mib=reserved if reserved else max(0, total - used - free),
            temperature_c=float(temp),
            memory_temperature_c=fields.get(nv.NVML_FI_DEV_MEMORY_TEMP),
            power_w=power_mw / 1000.0,
            total_energy_mj=int(energy),
            sm_clock_mhz=int(optional("nvmlDeviceGetClockInfo", clocks, handle, nv.NVML_CLOCK_SM, default=0)),
            mem_clock_mhz=int(optional("nvmlDeviceGetClockInfo", clocks, handle, nv.NVML_CLOCK_MEM, default=0)),
            pcie_replay_count=int(replays),
            ecc_sbe_volatile=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_dbe_volatile=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            nvlink_bandwidth_total=self._nvlink(fields),
            last_xid=last_xid(uuid),
            pcie_tx_bytes_per_s=self._pcie(handle, nv.NVML_PCIE_UTIL_TX_BYTES),
            pcie_rx_bytes_per_s=self._pcie(handle, nv.NVML_PCIE_UTIL_RX_BYTES),
            remapped_rows_correctable=int(rows[0]) if rows is not None else None,
            remapped_rows_uncorrectable=int(rows[1]) if rows is not None else None,
            row_remap_failure=int(rows[3]) if rows is not None else None,
            clock_event_reasons=self._clock_events(handle),
            vgpu_license_status=self._license(handle),
            profiling=self._profiling(uuid, handle),
        )

    def close(self) -> None:
        """Free the GPM samples still held (NVML frees the rest at shutdown)."""
        with self._lock:
            held, self._gpm = list(self._gpm.values()), {}
        for sample in held:
            if sample is not None:
                optional("nvmlGpmSampleFree", self._nv.nvmlGpmSampleFree, sample, default=None)

    # --- one reading each ----------------------------------------------------------------------

    def _memory(self, handle: Any, where: str) -> tuple[int, int, int, int]:
        nv = self._nv
        try:
            mem = call("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, handle, version=nv.nvmlMemory_v2)
            reserved = int(mem.reserved) // _MIB
        except GpuLostError:
            raise
        except GpuError:  # drivers before the v2 struct: "used" then includes the reserved part
            mem = call("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, handle, what=where)
            reserved = 0
        return int(mem.total) // _MIB, int(mem.used) // _MIB, int(mem.free) // _MIB, reserved

    def _ecc(self, handle: Any, kind: int) -> int:
        nv = self._nv
        fn = nv.nvmlDeviceGetTotalEccErrors
        return int(optional("nvmlDeviceGetTotalEccErrors", fn, handle, kind, nv.NVML_VOLATILE_ECC, default=0))

    def _nvlink(self, fields: dict[int, float]) -> int | None:
        found = [fields[i] for i in self._nvlink_ids if i in fields]
        return int(sum(found)) if len(found) == len(self._nvlink_ids) else None

    def _pcie(self, handle: Any, counter: int) -> int | None:
        fn = self._nv.nvmlDeviceGetPcieThroughput
        kbps = optional("nvmlDeviceGetPcieThroughput", fn, handle, counter, default=None)
        return int(kbps) * 1024 if kbps is not None else None  # NVML counts KB/s, DCGM bytes/s

    def _clock_events(self, handle: Any) -> int | None:
        fn = self._nv.nvmlDeviceGetCurrentClocksEventReasons
        reasons = optional("nvmlDeviceGetCurrentClocksEventReasons", fn, handle, default=None)
        return int(reasons) if reasons is not None else None

    def _license(self, handle: Any) -> int | None:
        """1 or 0 on a vGPU guest; None elsewhere (bare metal and passthrough hold no vGPU licence)."""
        nv = self._nv
        fn = nv.nvmlDeviceGetVirtualizationMode
        mode = optional("nvmlDeviceGetVirtualizationMode", fn, handle, default=None)
        if mode is None or int(mode) != nv.NVML_GPU_VIRTUALIZATION_MODE_VGPU:
            return None
        fn = nv.nvmlDeviceGetGridLicensableFeatures_v4
        features = optional("nvmlDeviceGetGridLicensableFeatures_v4", fn, handle, default=None)
        if features is None or not features.isGridLicenseSupported:
            return None
        states = [features.gridLicensableFeatures[i].featureState for i in range(features.licensableFeaturesCount)]
        return int(any(state == 1 for state in states))

    def _profiling(self, uuid: str, handle: Any) -> dict[str, float]:
        """GPM metrics between the previous GPM sample and a new one (empty without GPM, or on the first)."""
        nv = self._nv
        # One lock over the whole exchange: two readings at once must not both free the previous sample.
        with self._lock:
            if uuid not in self._gpm:
                support = optional("nvmlGpmQueryDeviceSupport", nv.nvmlGpmQueryDeviceSupport, handle, default=None)
                self._gpm[uuid] = None if support is None or not support.isSupportedDevice else False
            previous = self._gpm[uuid]
            if previous is None:
                return {}
            if previous is not False and self._clock() - self._gpm_taken[uuid] < GPM_MIN_INTERVAL_S:
                return dict(self._gpm_last.get(uuid, {}))
            current = call("nvmlGpmSampleAlloc", nv.nvmlGpmSampleAlloc)
            try:
                call("nvmlGpmSampleGet", nv.nvmlGpmSampleGet, handle, current)
            except GpuError:
                optional("nvmlGpmSampleFree", nv.nvmlGpmSampleFree, current, default=None)
                raise
            self._gpm[uuid], self._gpm_taken[uuid] = current, self._clock()
            if previous is False:
                return {}
            try:
                self._gpm_last[uuid] = self._metrics(previous, current)
            finally:
                optional("nvmlGpmSampleFree", nv.nvmlGpmSampleFree, previous, default=None)
            return dict(self._gpm_last[uuid])

    def _metrics(self, previous: Any, current: Any) -> dict[str, float]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1, request.sample2 = previous, current
        for slot, metric in enumerate(_GPM_METRICS.values()):
            request.metrics[slot].metricId = metric
        call("nvmlGpmMetricsGet", nv.nvmlGpmMetricsGet, request)
        out: dict[str, float] = {}
        for slot, name in enumerate(_GPM_METRICS):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nv.NVML_SUCCESS:
                out[name] = round(max(0.0, min(100.0, float(metric.value))) / 100.0, 6)
        return out
