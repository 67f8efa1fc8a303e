"""The Mellanox kernel modules behind one interface: the real host, a simulated node, and none.

:class:`HostOfed` does what the DOCA driver container does on a host: ``/sys/module/<m>`` (the host's
sysfs under ``HOST_ROOT``) says what is loaded, ``refcnt`` how many hold it and ``srcversion`` which
build; ``rmmod`` unloads and ``modprobe -d <root>`` loads from a module tree (the host's own, so the
inbox or host-installed driver); the exported root is the host's ``/usr/src`` bound under
``/run/mellanox/drivers/usr/src`` when it holds ``ofa_kernel`` (what the GPU driver's peer-memory
module builds against). :class:`SimulatedOfed` keeps the same facts as files under a simulated
node's host root, with the simulator's faults (``etc/simulated-ofed/fault`` and ``load-seconds``,
the stand-in's semantics); :class:`NullOfed` loads nothing (a node whose kernel already has the stack).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

#: Dependants first (each one holds the ones after it): what a driver swap unloads, in this order.
UNLOAD_ORDER = (
    "nvidia_peermem", "mlx5_vdpa", "mlx5_fwctl", "mlx5_dpll", "rdma_ucm", "ib_ipoib", "ib_umad", "rdma_cm",
    "ib_cm", "iw_cm", "mlx5_ib", "ib_uverbs", "mlx5_core", "ib_core", "mlx_compat",
)  # fmt: skip
#: What a load asks modprobe for (their dependencies come with them): the NIC, verbs, MADs, RDMA CM, IPoIB.
LOAD_MODULES = ("mlx5_core", "mlx5_ib", "ib_uverbs", "ib_umad", "rdma_ucm", "ib_ipoib")
#: Upstream's storage-over-RDMA modules: they hold ib_core, so a swap needs them gone (UNLOAD_STORAGE_MODULES).
STORAGE_MODULES = ("ib_isert", "nvme_rdma", "nvmet_rdma", "rpcrdma", "xprtrdma", "ib_srpt")
#: A simulated modprobe's dependencies (mlx_compat: the DOCA/MLNX_OFED build's compatibility layer).
SIM_DEPENDENCIES = {
    "mlx5_core": ("mlx_compat",),
    "ib_uverbs": ("mlx_compat", "ib_core"),
    "mlx5_ib": ("mlx_compat", "ib_core", "ib_uverbs", "mlx5_core"),
    "ib_umad": ("ib_core",),
    "rdma_ucm": ("ib_core", "ib_cm", "iw_cm", "rdma_cm", "ib_uverbs"),
    "ib_ipoib": ("ib_core", "ib_cm"),
}
EXPORTED_SOURCES = "usr/src/ofa_kernel"
FAULT_FILE = "/etc/simulated-ofed/fault"
LOAD_SECONDS_FILE = "/etc/simulated-ofed/load-seconds"
SIM_LOAD_SECONDS = 0.5
MAX_SIM_LOAD_SECONDS = 600.0  # a simulated load longer than this is a typo, not a test
FAIL, HANG = "fail", "hang"


class ModuleError(Exception):
    """A module could not be loaded or unloaded (the message says which and why)."""


class OfedHost(Protocol):
    """The host side of the OFED driver: its modules and its exported root."""

    def loaded(self) -> list[str]:
        """The modules of :data:`UNLOAD_ORDER` and :data:`STORAGE_MODULES` loaded now."""
        ...

    def users(self, module: str) -> int: ...

    def srcversion(self, module: str) -> str:
        """The build of the loaded ``module`` ("" when unknown)."""
        ...

    def target_srcversion(self, module: str) -> str:
        """The build ``load`` would load ("" when unknown: then the driver is always reloaded)."""
        ...

    def unload(self, module: str) -> None: ...

    def load(self, module: str) -> None: ...

    def expose_root(self, drivers: Path) -> None:
        """Make the driver's sources visible under ``drivers`` (``/run/mellanox/drivers``)."""
        ...

    def release_root(self, drivers: Path) -> None: ...

    def restore(self, modules: Sequence[str]) -> None:
        """Load back the host's own modules that were loaded before the swap (raises ModuleError)."""
        ...

    def fault(self) -> tuple[str, float]:
        """A simulated node's injected fault (``fail``, ``hang`` or "") and load delay; real hosts: ("", 0)."""
        ...


def _run(command: Sequence[str], *, timeout: float) -> str:
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ModuleError(f"{' '.join(command)}: {error}") from error
    if result.returncode != 0:
        raise ModuleError(f"{' '.join(command)} failed: {(result.stderr or result.stdout).strip()[:400]}")
    return result.stdout


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):  # an unreadable fact reads as absent, as a missing one
        return ""


class _SysModules:
    """``/sys/module`` facts, shared by the real and simulated hosts."""

    def __init__(self, *, sys_root: Path) -> None:
        self.sys_root = sys_root

    def loaded(self) -> list[str]:
        names = (*UNLOAD_ORDER, *STORAGE_MODULES)
        return [m for m in names if (self.sys_root / "module" / m / "refcnt").exists()]

    def users(self, module: str) -> int:
        try:
            return int(_read(self.sys_root / "module" / module / "refcnt") or 0)
        except ValueError:
            return 0

    def srcversion(self, module: str) -> str:
        return _read(self.sys_root / "module" / module / "srcversion")


class HostOfed(_SysModules):
    """OfedHost on a real node (privileged container, host root under ``host_root``)."""

    def __init__(self, *, sys_root: Path, host_root: Path) -> None:
        super().__init__(sys_root=sys_root)
        self.host_root = host_root

    def target_srcversion(self, module: str) -> str:
        try:
            return _run(["modinfo", "-b", str(self.host_root), "-F", "srcversion", module], timeout=60).strip()
        except ModuleError:
            return ""

    def unload(self, module: str) -> None:
        _run(["rmmod", module], timeout=120)

    def load(self, module: str) -> None:
        _run(["modprobe", "-d", str(self.host_root), module], timeout=300)

    def expose_root(self, drivers: Path) -> None:
        sources = self.host_root / "usr" / "src"
        target = drivers / "usr" / "src"
        if not (sources / "ofa_kernel").is_dir() or os.path.ismount(target):
            return  # an inbox driver has no ofa_kernel: nothing to build against
        target.mkdir(parents=True, exist_ok=True)
        _run(["mount", "--rbind", "-o", "ro", str(sources), str(target)], timeout=60)

    def release_root(self, drivers: Path) -> None:
        target = drivers / "usr" / "src"
        if os.path.ismount(target):
            _run(["umount", "-l", "-R", str(target)], timeout=60)

    def restore(self, modules: Sequence[str]) -> None:
        for module in modules:
            self.load(module)

    def fault(self) -> tuple[str, float]:
        return "", 0.0


class SimulatedOfed(_SysModules):
    """OfedHost on a simulated node: module directories under its host root, the simulator's faults.

    ``version`` is the driver this container stands for (a fault naming another version does not apply).
    """

    def __init__(self, *, host_root: Path, version: str = "") -> None:
        super().__init__(sys_root=host_root / "sys")
        self.host_root = host_root
        self.version = version

    def _module(self, module: str) -> Path:
        return self.sys_root / "module" / module

    def target_srcversion(self, module: str) -> str:
        return ""  # a simulated driver always reloads, as the stand-in did

    def unload(self, module: str) -> None:
        shutil.rmtree(self._module(module), ignore_errors=True)

    def load(self, module: str) -> None:
        for name in (*SIM_DEPENDENCIES.get(module, ()), module):
            path = self._module(name)
            if (path / "refcnt").exists():
                continue
            path.mkdir(parents=True, exist_ok=True)
            (path / "srcversion").write_text(f"simulated-{self.version or 'ofed'}\n", encoding="utf-8")
            (path / "refcnt").write_text("0\n", encoding="utf-8")

    def expose_root(self, drivers: Path) -> None:
        (drivers / EXPORTED_SOURCES / "default").mkdir(parents=True, exist_ok=True)

    def release_root(self, drivers: Path) -> None:
        shutil.rmtree(drivers / "usr", ignore_errors=True)

    def restore(self, modules: Sequence[str]) -> None:
        return None  # a simulated node has no in-tree driver of its own: unloaded is restored

    def fault(self) -> tuple[str, float]:
        words = _read(self.host_root / FAULT_FILE.lstrip("/")).split()
        mode = words[0] if words and words[0] in (FAIL, HANG) else ""
        wanted = " ".join(words[1:])
        if wanted and wanted not in self.version:
            mode = ""
        text = _read(self.host_root / LOAD_SECONDS_FILE.lstrip("/")).strip()
        try:  # ASCII and short: float() also reads "inf" and other scripts' digits
            seconds = float(text) if text.isascii() and len(text) <= 32 else SIM_LOAD_SECONDS
        except ValueError:
            seconds = SIM_LOAD_SECONDS
        seconds = max(0.0, seconds)
        if not math.isfinite(seconds) or seconds > MAX_SIM_LOAD_SECONDS:  # never an endless load
            seconds = SIM_LOAD_SECONDS
        return mode, seconds


class NullOfed:
    """OfedHost that loads nothing: nothing is loaded, the root exports nothing."""

    def loaded(self) -> list[str]:
        return []

    def users(self, module: str) -> int:
        return 0

    def srcversion(self, module: str) -> str:
        return ""

    def target_srcversion(self, module: str) -> str:
        return ""

    def unload(self, module: str) -> None:
        return None

    def load(self, module: str) -> None:
        return None

    def expose_root(self, drivers: Path) -> None:
        return None

    def release_root(self, drivers: Path) -> None:
        return None

    def restore(self, modules: Sequence[str]) -> None:
        return None

    def fault(self) -> tuple[str, float]:
        return "", 0.0
