"""The one interface agents use to reach the GPU stack, and its errors.

Three implementations: ``nvml`` (real NVML through nvidia-ml-py, imported lazily), ``simulated``
(data-driven GPU models and node profiles with injectable faults) and ``null`` (no GPU). Agents take a
``GpuBackend`` as an argument and never import a backend module themselves, so one process can run
many simulated nodes, each with its own backend instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpu_operator.gpu.types import Device, HealthEvent, Link, MigDevice, Sample


class GpuError(Exception):
    """A GPU backend call failed; the message says which call and why."""


class GpuNotFoundError(GpuError):
    """No GPU driver or library on this machine (NVML missing, or the null backend)."""


class GpuLostError(GpuError):
    """A GPU fell off the bus or stopped answering."""


class NotSupportedError(GpuError):
    """The GPU or driver does not support this query (e.g. MIG on a T4)."""


@runtime_checkable
class GpuBackend(Protocol):
    """What the node agents need from the GPU stack."""

    name: str  # "nvml", "simulated" or "null"

    def driver_version(self) -> str:
        """The kernel driver version, e.g. ``"550.54.15"`` (raises GpuNotFoundError without a driver)."""
        ...

    def cuda_driver_version(self) -> tuple[int, int]:
        """The CUDA driver API version, e.g. ``(12, 4)``."""
        ...

    def devices(self) -> Sequence[Device]:
        """Every physical GPU, ordered by index (GpuLostError naming the GPU when one stopped answering)."""
        ...

    def topology(self) -> Sequence[Link]:
        """The link between every pair of GPUs (a < b)."""
        ...

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        """The MIG devices of GPU ``index`` (empty when MIG is off)."""
        ...

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        """Change MIG mode; returns True when a GPU reset is still needed for it to take effect.

        A pending change shows as ``Device.mig_pending``; the reset itself (``nvidia-smi -r`` or a
        reboot) is the MIG manager's business, outside this interface.
        """
        ...

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        """Replace the MIG geometry of GPU ``index`` with one device per profile name (e.g. ``1g.10gb``).

        The layout is checked before anything is destroyed: an unknown profile or one that does not
        fit raises GpuError and leaves the old geometry in place. Needs MIG mode enabled.
        """
        ...

    def sample(self) -> Sequence[Sample]:
        """One reading of every GPU's counters; a GPU that stopped answering is left out."""
        ...

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        """Health events since the last call, waiting up to ``timeout`` seconds for the first one.

        Returns as soon as an event arrives, an empty list on timeout; raises GpuError as soon as
        the backend is closed (or GpuNotFoundError when the driver goes away) while waiting.
        """
        ...

    def close(self) -> None:
        """Release the backend (NVML shutdown); idempotent. Other calls then raise GpuError."""
        ...


@runtime_checkable
class ResettableBackend(Protocol):
    """A backend that resets a GPU itself (the simulated one: ``nvidia-smi -r`` without a host)."""

    def reset_gpu(self, index: int) -> None: ...


@runtime_checkable
class LoadableBackend(Protocol):
    """A backend whose driver can be loaded, unloaded and replaced in place (the simulated one), so
    the driver manager and driver agent act on it instead of on a host's kernel modules."""

    def set_present(self, present: bool) -> None: ...

    def set_driver_version(self, version: str) -> None: ...
