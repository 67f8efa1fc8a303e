"""Readings and health events for the NVML backend.

Health events come from an NVML event set registered, on first use, for XID and double-bit ECC
events on every GPU that supports them (what the upstream device plugin registers). A wait is cut
into slices of half a second so that ``close`` from another thread and a lost GPU coming back
are noticed promptly. NVML has no "lost" or "recovered" event: a lost GPU is noticed when a call (or
the event wait) answers "GPU is lost", and a lost GPU that answers again yields a recovered event.

Recovery after a reset: an XID also sets the GPU's recovery action (``gpu.recovery``; NVML field
``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``). After an XID the GPU is watched: its field is read once per
wait slice while it asks for an action, and when it goes back to ``NONE`` after asking for a reset
(``nvidia-smi -r``, or the driver's own recovery), a recovered event with ``reset=True`` goes out. A GPU
whose XID asks for nothing (or whose driver lacks the field) stops being watched after
``_WATCH_UNASKED_S``. The ``nvmlEventTypeGpuRecoveryAction`` event is not registered: polling the few
watched GPUs each slice is as prompt and works on drivers that lack that event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpu_operator.gpu import recovery
from gpu_operator.gpu.backend import GpuError, GpuLostError, NotSupportedError
from gpu_operator.gpu.nvml_lib import call, field_values, is_nvml_error, nvml, text, translate
from gpu_operator.gpu.types import HealthEvent

if TYPE_CHECKING:
    from gpu_operator.gpu.nvml import NvmlBackend

_SLICE_S = 0.5  # how long close() or a recovering GPU may go unnoticed by a waiting thread
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event not tied to a MIG instance
_MAX_DRAIN = 64
_MAX_KEPT = 256  # pending events kept for a waiter that may never come
_WATCH_UNASKED_S = 5.0  # how long an XID's GPU is watched for a recovery action that never shows


@dataclass(kw_only=True)
class _Watch:
    """A GPU whose recovery action is watched after an XID."""

    handle: Any
    xid: int
    until: float  # monotonic time after which a GPU that never asked for a reset is dropped
    asked: int = recovery.NONE  # the reset-type action it asked for, once it did


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
        self._watched: dict[str, _Watch] = {}  # UUID -> a GPU whose recovery action is watched
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
                events = self._take_pending() + self._probe_lost() + self._probe_recovery()
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

    def last_xid(self, uuid: str) -> int:
        """The last XID reported for GPU ``uuid`` since events were registered (0: none)."""
        with self._lock:
            return self._last_xid.get(uuid, 0)

    def poll(self) -> None:
        """Take the events queued in NVML without waiting, so readings know the last XID even in a
        process that never waits for events (the exporter). The events stay pending for ``wait``;
        without a waiter only the newest ``_MAX_KEPT`` are kept."""
        if self._closing.is_set() or not self._wait_lock.acquire(blocking=False):
            return  # a waiter is draining the event set already
        try:
            if self._ensure_event_set() is None:
                return
            events = self._wait_slice(0.0)
            with self._lock:
                self._pending = (self._pending + events)[-_MAX_KEPT:]
        finally:
            self._wait_lock.release()

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

    def _probe_recovery(self) -> list[HealthEvent]:
        """Recovered events (``reset=True``) for watched GPUs whose reset request was satisfied."""
        with self._lock:
            watched = list(self._watched.items())
        events = []
        now = time.monotonic()
        for uuid, watch in watched:
            action = self._recovery_action(watch.handle)
            if action is None:
                continue  # lost or unreadable right now: look again next slice
            if action != recovery.NONE:
                if recovery.needs_reset(action):
                    watch.asked = action
                continue
            if watch.asked == recovery.NONE and now < watch.until:
                continue  # nothing asked yet: the driver may set it just after the XID
            with self._lock:
                if self._watched.get(uuid) is watch:  # not replaced by a newer XID meanwhile
                    del self._watched[uuid]
            if watch.asked != recovery.NONE:
                message = f"GPU reset cleared XID {watch.xid} ({recovery.describe(watch.asked)} was required)"
                events.append(HealthEvent(uuid=uuid, recovered=True, reset=True, message=message))
        return events

    def _recovery_action(self, handle: Any) -> int | None:
        """The GPU's recovery action; None when it cannot be read (lost, or no such field)."""
        field = self._nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        try:
            action = field_values(handle, [(field, 0)]).get(field)
        except GpuError:
            return None
        return int(action) if action is not None else None

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
                if uuid:  # a later slice reads what the driver asks for (see the module docstring)
                    until = time.monotonic() + _WATCH_UNASKED_S
                    self._watched[uuid] = _Watch(handle=data.device, xid=xid, until=until)
            return HealthEvent(uuid=uuid, xid=xid, gi_id=gi, ci_id=ci, message=f"XID {xid}")
        return HealthEvent(uuid=uuid, gi_id=gi, ci_id=ci, message="uncorrectable (double-bit) ECC error")
