"""The one door to ``pynvml``: lazy import, process-wide init/shutdown, and error translation.

NVML is initialised once per process however many NvmlBackend instances exist (a reference count
under a lock: the first ``acquire`` calls ``nvmlInit``, the last ``release`` calls ``nvmlShutdown``).
Every NVML call goes through ``call``, which names the NVML function (and the GPU) in the error and
maps NVML's error classes onto the project's: library or driver missing -> GpuNotFoundError, GPU lost
-> GpuLostError, not supported or missing from the library -> NotSupportedError, the rest -> GpuError.
``pynvml`` is imported here, inside functions, so importing ``gpu_operator.gpu`` never loads it. When
the container's loader finds no ``libnvidia-ml.so.1`` (an agent image carries no driver), the
driver's own library is loaded from the driver root on the host (``library_candidates``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

from gpu_operator.gpu.backend import GpuError, GpuLostError, GpuNotFoundError, NotSupportedError

T = TypeVar("T")

# NVML's own state is per process, so its reference count is too; nothing else lives at module level.
_lock = threading.Lock()
_refs = 0


def nvml() -> ModuleType:
    """The ``pynvml`` module (GpuNotFoundError if the binding is not installed)."""
    try:
        import pynvml  # noqa: PLC0415 - imported on first use so a GPU-less import stays cheap
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a declared dependency
        raise GpuNotFoundError(f"the NVML Python binding (nvidia-ml-py) is not installed: {exc}") from exc
    return cast(ModuleType, pynvml)


#: Where a driver keeps libnvidia-ml.so.1 under its root (the host's ``/``, or a driver container's root).
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "lib64", "lib")
LIBRARY = "libnvidia-ml.so.1"


def library_candidates(environ: Mapping[str, str]) -> list[Path]:
    """Where to look for the driver's NVML library when the container's loader finds none.

    An agent's container does not carry the driver: its libraries are on the host, under the driver
    root (``DRIVER_INSTALL_DIR`` or ``NVIDIA_DRIVER_ROOT``, e.g. ``/run/nvidia/driver`` for a driver
    container, ``/`` for a host driver), which the pod sees through the host root mount (``HOST_ROOT``).
    ``NVML_LIBRARY_PATH`` names the file itself and wins.
    """
    if environ.get("NVML_LIBRARY_PATH"):
        return [Path(environ["NVML_LIBRARY_PATH"])]
    host = Path(environ.get("HOST_ROOT") or "/")
    roots = [environ.get(name, "") for name in ("DRIVER_INSTALL_DIR", "NVIDIA_DRIVER_ROOT")] + ["/"]
    found: list[Path] = []
    for root in dict.fromkeys(r for r in roots if r):
        base = host / root.lstrip("/")
        found += [base / directory / LIBRARY for directory in LIBRARY_DIRS]
    return found


def _preload_from_driver_root(environ: Mapping[str, str]) -> Path | None:
    """Load the first candidate library globally, so pynvml's ``dlopen(libnvidia-ml.so.1)`` finds it
    already loaded (the dynamic loader matches an open library by its soname)."""
    for candidate in library_candidates(environ):
        if candidate.is_file():
            ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
            return candidate
    return None


def acquire() -> None:
    """Initialise NVML if this is the first user in the process."""
    global _refs  # noqa: PLW0603 - the process-wide NVML reference count
    with _lock:
        if _refs == 0:
            nv = nvml()
            try:
                call("nvmlInit", nv.nvmlInit)
            except GpuNotFoundError:
                if _preload_from_driver_root(os.environ) is None:
                    raise
                call("nvmlInit", nv.nvmlInit)
        _refs += 1


def release() -> None:
    """Drop one reference; the last one shuts NVML down."""
    global _refs  # noqa: PLW0603 - the process-wide NVML reference count
    with _lock:
        if _refs == 0:
            return
        _refs -= 1
        if _refs == 0:
            call("nvmlShutdown", nvml().nvmlShutdown)


def references() -> int:
    """How many open NvmlBackends share NVML in this process (for tests and diagnostics)."""
    with _lock:
        return _refs


def translate(name: str, exc: Exception, *, what: str = "") -> GpuError:
    """The project error for NVML error ``exc`` raised by NVML function ``name``."""
    nv = nvml()
    code = getattr(exc, "value", None)
    where = f" ({what})" if what else ""
    message = f"{name}{where}: {exc} [NVML error {code}]"
    if code in (nv.NVML_ERROR_LIBRARY_NOT_FOUND, nv.NVML_ERROR_DRIVER_NOT_LOADED):
        return GpuNotFoundError(message)
    if code == nv.NVML_ERROR_GPU_IS_LOST:
        return GpuLostError(message)
    if code == nv.NVML_ERROR_FUNCTION_NOT_FOUND:
        return NotSupportedError(f"{message}: the loaded libnvidia-ml.so.1 lacks {name} (driver too old?)")
    if code == nv.NVML_ERROR_NOT_SUPPORTED:
        return NotSupportedError(message)
    return GpuError(message)


def call(name: str, fn: Callable[..., T], *args: Any, what: str = "", **kwargs: Any) -> T:
    """``fn(*args)``, with NVML errors translated and naming ``name`` (and ``what``, e.g. "GPU 3")."""
    nv = nvml()
    try:
        return fn(*args, **kwargs)
    except nv.NVMLError as exc:
        raise translate(name, exc, what=what) from exc


def optional(name: str, fn: Callable[..., T], *args: Any, default: T, what: str = "", **kwargs: Any) -> T:
    """Like ``call`` for queries the agents can live without: NotSupportedError gives ``default``."""
    try:
        return call(name, fn, *args, what=what, **kwargs)
    except NotSupportedError:
        return default


# nvmlValue_t member for each NVML_VALUE_TYPE_*.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_values(handle: Any, requests: Sequence[tuple[int, int]], *, what: str = "") -> dict[int, float]:
    """``nvmlDeviceGetFieldValues`` for (field id, scope id) pairs, in one call: field id -> value.

    A field the GPU does not support is left out (so is every field when the driver lacks the call);
    other errors raise as ``call`` does (GpuLostError for a lost GPU).
    """
    nv = nvml()
    fn = nv.nvmlDeviceGetFieldValues
    values = optional("nvmlDeviceGetFieldValues", fn, handle, list(requests), default=None, what=what)
    out: dict[int, float] = {}
    for value in values or ():
        if value.nvmlReturn != nv.NVML_SUCCESS:
            continue
        kind = int(value.valueType)
        member = _VALUE_MEMBERS[kind] if 0 <= kind < len(_VALUE_MEMBERS) else "uiVal"
        out[int(value.fieldId)] = float(getattr(value.value, member))
    return out


def is_nvml_error(exc: BaseException, code: int) -> bool:
    """Whether ``exc`` is the NVML error with return code ``code`` (e.g. NVML_ERROR_TIMEOUT)."""
    return isinstance(exc, nvml().NVMLError) and getattr(exc, "value", None) == code


def text(value: str | bytes) -> str:
    """NVML strings arrive as ``str`` or ``bytes`` depending on the pynvml function."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def bus_id(value: str | bytes) -> str:
    """A PCI bus id in NVML's canonical form, ``00000000:3B:00.0`` (8-digit domain, upper case)."""
    parts = text(value).strip().upper().split(":")
    domain = parts[0] if len(parts) == 3 else "0"
    return f"{int(domain, 16):08X}:{':'.join(parts[-2:])}"
