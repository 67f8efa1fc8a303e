"""The null backend: a node without an NVIDIA GPU or driver.

Agents that run everywhere (the validator, feature discovery on a CPU node) get this backend when
NVML cannot be loaded, so "no GPU" is an ordinary answer instead of an import or library error:
lists are empty, anything about the driver or a specific GPU raises GpuNotFoundError, and waiting
for health events simply waits (without spinning) until the timeout or ``close``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpu_operator.gpu.backend import GpuError, GpuNotFoundError
from gpu_operator.gpu.types import Device, HealthEvent, Link, MigDevice, Sample


class NullBackend:
    """GpuBackend for a machine without GPUs."""

    name = "null"

    def __init__(self, *, reason: str = "no NVIDIA GPU or driver on this machine") -> None:
        self._reason = reason
        self._closed = threading.Event()

    def driver_version(self) -> str:
        self._check()
        raise GpuNotFoundError(self._reason)

    def cuda_driver_version(self) -> tuple[int, int]:
        self._check()
        raise GpuNotFoundError(self._reason)

    def devices(self) -> Sequence[Device]:
        self._check()
        return []

    def topology(self) -> Sequence[Link]:
        self._check()
        return []

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        raise self._no_gpu(index)

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        raise self._no_gpu(index)

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        raise self._no_gpu(index)

    def sample(self) -> Sequence[Sample]:
        self._check()
        return []

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        self._check()
        # Nothing can happen, but callers loop on this: block for the timeout rather than spin.
        self._closed.wait(timeout)
        self._check()
        return []

    def close(self) -> None:
        self._closed.set()

    def _check(self) -> None:
        if self._closed.is_set():
            raise GpuError("null backend is closed")

    def _no_gpu(self, index: int) -> GpuError:
        self._check()
        return GpuNotFoundError(f"no GPU {index}: {self._reason}")
