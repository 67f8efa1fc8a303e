"""The ``auto`` backend: NVML once the driver is there, asked again until it is.

An agent's container often starts before the driver is loaded (the driver container installs it, the
validator waits for it). Opening NVML once at start and keeping the null backend forever left such
agents blind for their whole life. This backend holds NVML when it opens; while it does not, each
call is answered by the null backend, and NVML is tried again at most every ``retry_seconds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from gpu_operator.gpu.backend import GpuBackend, GpuNotFoundError
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.types import Device, HealthEvent, Link, MigDevice, Sample

RETRY_SECONDS = 5.0


class ReopeningBackend:
    """Delegates to NVML once ``open_nvml`` succeeds; to a null backend (saying why) until then."""

    def __init__(
        self,
        *,
        open_nvml: Callable[[], GpuBackend],
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_nvml = open_nvml
        self._retry = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._current: GpuBackend = NullBackend(reason="NVML not opened yet")
        self._opened = False
        self._next_try = 0.0
        self._closed = False
        #: The backend answering now: "null" until NVML opens, then "nvml".
        self.name = self._current.name
        self._current_now()

    def _current_now(self) -> GpuBackend:
        with self._lock:
            if self._opened or self._closed or self._clock() < self._next_try:
                return self._current
            try:
                backend = self._open_nvml()
            except GpuNotFoundError as error:
                self._current.close()
                self._current = NullBackend(reason=str(error))
                self._next_try = self._clock() + self._retry
                return self._current
            self._current.close()
            self._current, self._opened = backend, True
            self.name = backend.name
            return backend

    def driver_version(self) -> str:
        return self._current_now().driver_version()

    def cuda_driver_version(self) -> tuple[int, int]:
        return self._current_now().cuda_driver_version()

    def devices(self) -> Sequence[Device]:
        return self._current_now().devices()

    def topology(self) -> Sequence[Link]:
        return self._current_now().topology()

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        return self._current_now().mig_devices(index)

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        return self._current_now().set_mig_mode(index, enabled=enabled)

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        return self._current_now().create_mig_devices(index, profiles=profiles)

    def sample(self) -> Sequence[Sample]:
        return self._current_now().sample()

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        current = self._current_now()
        if not self._opened:
            # Nothing to wait on yet: sleep out the timeout (bounded by the next retry) like a quiet GPU.
            time.sleep(min(timeout, self._retry))
            return []
        return current.wait_health_events(timeout=timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._current.close()
