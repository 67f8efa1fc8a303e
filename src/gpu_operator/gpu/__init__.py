"""GPU access behind one small interface, with NVML, simulated and null backends.

Agents receive a ``GpuBackend`` (see ``backend``) and use only its methods and the plain types in
``types``; they never import a backend module. ``open_backend`` picks one:

- ``"nvml"``: the real GPUs through NVML (``pynvml``, imported only when this backend is opened);
- ``"simulated"``: the GPUs of a catalog node profile (``catalog``), with injectable faults;
- ``"null"``: a machine without GPUs;
- ``"auto"``: NVML when the library and driver load; until they do, null, with NVML tried again
  every few seconds (an agent may start before the driver container has loaded the driver).

Importing this package loads neither ``pynvml`` nor ``libnvidia-ml``.
"""

from __future__ import annotations

from typing import Any

from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuLostError, GpuNotFoundError, NotSupportedError

__all__ = [
    "GpuBackend",
    "GpuError",
    "GpuLostError",
    "GpuNotFoundError",
    "NotSupportedError",
    "open_backend",
]

KINDS = ("auto", "nvml", "simulated", "null")


def open_backend(kind: str = "auto", **kw: Any) -> GpuBackend:
    """A backend of ``kind``; ``kw`` go to its constructor (``profile=``, ``seed=`` ... for simulated).

    For ``simulated``, ``profile`` may be a NodeProfile or a profile name. ``auto`` answers as the null
    backend only while NVML reports no library or driver (GpuNotFoundError), and keeps trying; other
    NVML errors are real problems and propagate.
    """
    if kind == "nvml":
        from gpu_operator.gpu.nvml import NvmlBackend  # noqa: PLC0415 - loads pynvml only when asked for

        return NvmlBackend(**kw)
    if kind == "simulated":
        from gpu_operator.gpu.catalog import node_profile  # noqa: PLC0415
        from gpu_operator.gpu.simulated import SimulatedBackend  # noqa: PLC0415

        if isinstance(kw.get("profile"), str):
            kw["profile"] = node_profile(kw["profile"])
        return SimulatedBackend(**kw)
    if kind == "null":
        from gpu_operator.gpu.null import NullBackend  # noqa: PLC0415

        return NullBackend(**kw)
    if kind == "auto":
        from gpu_operator.gpu.reopening import ReopeningBackend  # noqa: PLC0415

        return ReopeningBackend(open_nvml=lambda: open_backend("nvml", **kw))
    raise ValueError(f"unknown GPU backend kind {kind!r}; expected one of {', '.join(KINDS)}")
