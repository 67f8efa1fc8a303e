"""Readings and health events for the NVML backend.

Health events come from an NVML event set registered, on first use, for XID and double-bit ECC
events on every GPU that supports them (what the upstream device plugin registers). A wait is cut
into slices of half a second so that ``close`` from another thread and a lost GPU coming back
are noticed promptly. NVML has no "lost" or "recovered" event: a lost GPU is noticed when a call (or
the event wait) answers "GPU is lost", and a lost GPU that answers again yields a recovered event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from gpu_operator.gpu.backend import GpuError, GpuLostError, NotSupportedError
from gpu_operator.gpu.nvml_lib import call, is_nvml_error, nvml, optional, text, translate
from gpu_operator.gpu.types import HealthEvent, Sample

if TYPE_CHECKING:
    from gpu_operator.gpu.nvml import NvmlBackend

_MIB = 1 << 20
_SLICE_S = 0.5  # how long close() or a recovering GPU may go unnoticed by a waiting thread
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event not tied to a MIG instance
_MAX_DRAIN = 64
# nvmlValue_t member for each NVML_VALUE_TYPE_*.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class HealthWatch:
    """The event set, the lost-GPU bookkeeping and the last XID per GPU of one NvmlBackend."""

    def __init__(self, backend: NvmlBackend) -> None:
        self._backend = backend
        self._nv = nvml()
        self._lock = threading.Lock()  # guards the dictionaries and the pending list
        self._wait_lock = threading.Lock()  # one NVML wait at a time; close waits for it to end
        self._closing = threading.Event()
        self._pending: list[HealthEvent] = []
        self._lost: dict[int, str] = {}  # index -> UUID of GPUs that answered "GPU is lost"
        self._uuids: dict[int, str] = {}
        self._last_xid: dict[str, int] = {}
        self._event_set: Any = None
        self._registered = False

    def remember(self, index: int, uuid: str) -> None:
        with self._lock:
            self._uuids[index] = uuid

    def mark_lost(self, index: int, why: str) -> None:
        with self._lock:
            if index in self._lost:
                return
            uuid = self._lost[index] = self._uuids.get(index, f"GPU {index}")
            self._pending.append(HealthEvent(uuid=uuid, lost=True, message=why))

    def wait(self, *, timeout: float) -> list[HealthEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._wait_lock:
            if not self._closing.is_set():
                self._ensure_event_set()  # even a zero timeout registers, so later events are kept
            while True:
                events = self._take_pending() + self._probe_lost()
                if events:
                    return events
                if self._closing.is_set():
                    raise GpuError("NVML backend is closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                events = self._wait_slice(min(remaining, _SLICE_S))
                if events:
                    return self._take_pending() + events

    def close(self) -> None:
        self._closing.set()
        with self._wait_lock:
            if self._event_set is not None:
                with contextlib.suppress(GpuError):  # shutting down anyway; NVML frees the rest on shutdown
                    call("nvmlEventSetFree", self._nv.nvmlEventSetFree, self._event_set)
                self._event_set = None

    def reading(self, index: int, handle: Any) -> Sample:
        """One Sample of GPU ``index``; queries a GPU may not support read as 0."""
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
            memory_temperature_c=self._field(handle, nv.NVML_FI_DEV_MEMORY_TEMP),
            power_w=power_mw / 1000.0,
            total_energy_mj=int(energy),
            sm_clock_mhz=int(optional("nvmlDeviceGetClockInfo", clocks, handle, nv.NVML_CLOCK_SM, default=0)),
            mem_clock_mhz=int(optional("nvmlDeviceGetClockInfo", clocks, handle, nv.NVML_CLOCK_MEM, default=0)),
            pcie_replay_count=int(replays),
            ecc_sbe_volatile=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_dbe_volatile=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            last_xid=self._last_xid.get(uuid, 0),
        )

    # --- internals ----------------------------------------------------------------------------

    def _take_pending(self) -> list[HealthEvent]:
        with self._lock:
            events, self._pending = self._pending, []
        return events

    def _probe_lost(self) -> list[HealthEvent]:
        """Recovered events for lost GPUs that answer again."""
        with self._lock:
            lost = dict(self._lost)
        events = []
        for index, uuid in lost.items():
            try:
                self._backend.uuid(index, self._backend.handle(index))
            except GpuError:
                continue
            with self._lock:
                self._lost.pop(index, None)
            events.append(HealthEvent(uuid=uuid, recovered=True, message="GPU answers again"))
        return events

    def _wait_slice(self, seconds: float) -> list[HealthEvent]:
        event_set = self._ensure_event_set()
        if event_set is None:
            self._closing.wait(seconds)  # no GPU can report events: just let the time pass
            return []
        nv = self._nv
        try:
            data = nv.nvmlEventSetWait_v2(event_set, int(seconds * 1000))
        except nv.NVMLError as exc:
            if is_nvml_error(exc, nv.NVML_ERROR_TIMEOUT):
                return []
            if is_nvml_error(exc, nv.NVML_ERROR_GPU_IS_LOST):
                self._find_lost()
                if not self._pending:
                    self._closing.wait(seconds)  # NVML may keep answering "lost": do not spin on it
                return []
            raise translate("nvmlEventSetWait_v2", exc) from exc
        events = [self._event(data)]
        for _ in range(_MAX_DRAIN):  # whatever else is queued, without waiting
            try:
                events.append(self._event(nv.nvmlEventSetWait_v2(event_set, 0)))
            except nv.NVMLError as exc:
                if is_nvml_error(exc, nv.NVML_ERROR_GPU_IS_LOST):
                    self._find_lost()  # the lost events go out with these, through the pending list
                break
        return events

    def _ensure_event_set(self) -> Any:
        if self._registered:
            return self._event_set
        nv, backend = self._nv, self._backend
        try:
            self._event_set = call("nvmlEventSetCreate", nv.nvmlEventSetCreate)
        except NotSupportedError:
            self._event_set = None
        wanted = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError
        for index in range(backend.count() if self._event_set is not None else 0):
            try:
                handle = backend.handle(index)
                backend.uuid(index, handle)
                fn = nv.nvmlDeviceGetSupportedEventTypes
                mask = int(call("nvmlDeviceGetSupportedEventTypes", fn, handle, what=f"GPU {index}")) & wanted
                if mask:
                    fn = nv.nvmlDeviceRegisterEvents
                    call("nvmlDeviceRegisterEvents", fn, handle, mask, self._event_set, what=f"GPU {index}")
            except NotSupportedError:
                continue  # too old for health events: the GPU stays healthy, as upstream does
            except GpuLostError as exc:
                self.mark_lost(index, str(exc))
        self._registered = True
        return self._event_set

    def _find_lost(self) -> None:
        backend = self._backend
        for index in range(backend.count()):
            try:
                backend.gpu_call(index, backend.uuid)
            except GpuError:
                continue  # gpu_call has recorded a lost GPU

    def _event(self, data: Any) -> HealthEvent:
        nv = self._nv
        try:
            uuid = text(nv.nvmlDeviceGetUUID(data.device))
        except nv.NVMLError:
            uuid = ""  # upstream treats an unreadable event UUID as "all GPUs"; consumers decide
        gi = None if data.gpuInstanceId == _NO_INSTANCE else int(data.gpuInstanceId)
        ci = None if data.computeInstanceId == _NO_INSTANCE else int(data.computeInstanceId)
        if data.eventType & nv.nvmlEventTypeXidCriticalError:
            xid = int(data.eventData)
            with self._lock:
                self._last_xid[uuid] = xid
            return HealthEvent(uuid=uuid, xid=xid, gi_id=gi, ci_id=ci, message=f"XID {xid}")
        return HealthEvent(uuid=uuid, gi_id=gi, ci_id=ci, message="uncorrectable (double-bit) ECC error")

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

    def _field(self, handle: Any, field_id: int) -> float:
        nv = self._nv
        values = optional("nvmlDeviceGetFieldValues", nv.nvmlDeviceGetFieldValues, handle, [field_id], default=None)
        if values is None or values[0].nvmlReturn != nv.NVML_SUCCESS:
            return 0.0
        kind = int(values[0].valueType)
        member = _VALUE_MEMBERS[kind] if 0 <= kind < len(_VALUE_MEMBERS) else "uiVal"
        return float(getattr(values[0].value, member))
