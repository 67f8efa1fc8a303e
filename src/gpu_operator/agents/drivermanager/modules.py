"""Kernel modules and the driver install, behind one interface with a real and a simulated implementation.

:class:`HostDriver` does what a driver container does on a host: ``/sys/module/<m>`` tells what is
loaded (``refcnt`` how many users hold it), ``rmmod``/``modprobe`` unload and load, the ``.run``
installer builds and installs, and ``nvidia-smi`` in the host root detects a pre-installed driver.
:class:`SimulatedDriver` keeps the same facts in the simulated node's host root (``sys/module/<m>/refcnt``
files a test can raise to make a module busy), takes ``load_seconds`` to "load", and loads or unloads
the GPUs of the node's simulated backend, so the other agents see the driver come and go.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

# Dependants first: nvidia itself goes last (k8s-driver-manager's order).
UNLOAD_ORDER = ("nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "nvidia_vgpu_vfio", "gdrdrv", "nvidia")
LOAD_ORDER = ("nvidia", "nvidia-uvm", "nvidia-modeset")
SIMULATED_FILES = ("usr/bin/nvidia-smi", "usr/bin/nvidia-persistenced")
#: On a simulated node, this host file makes driver installs fail (its text: one version, or empty for all).
FAIL_INSTALL_MARKER = "etc/simulated-driver/fail-install"


class ModuleError(Exception):
    """A module could not be loaded or unloaded (the message says which and why)."""


class DriverHost(Protocol):
    """The host side of the driver: modules, install, and detection of a host-installed driver."""

    def loaded(self) -> list[str]:
        """NVIDIA modules currently loaded, by their /sys/module name (``nvidia_uvm``)."""
        ...

    def users(self, module: str) -> int:
        """How many users hold ``module`` (its refcnt)."""
        ...

    def unload(self, module: str) -> None: ...

    def install(self, *, version: str, kernel: str) -> None:
        """Install the kernel modules and user-space files of ``version`` for ``kernel``."""
        ...

    def load(self, module: str) -> None: ...

    def host_driver_version(self) -> str | None:
        """The version of a driver installed on the host itself (not by us), None when there is none."""
        ...

    def expose_root(self, root: Path) -> None:
        """Make the driver's files visible under ``root`` (``/run/nvidia/driver``) for the other agents."""
        ...

    def release_root(self, root: Path) -> None:
        """Undo ``expose_root`` (also for a root a previous container left behind)."""
        ...


def unload_all(host: DriverHost) -> list[str]:
    """Unload every loaded NVIDIA module in the upstream order; returns what was unloaded (ModuleError)."""
    loaded = set(host.loaded())
    done = []
    for module in UNLOAD_ORDER:
        if module not in loaded:
            continue
        users = host.users(module)
        if users > 0:
            raise ModuleError(f"cannot unload {module}: in use by {users} user(s) (a process still holds the GPU)")
        host.unload(module)
        done.append(module)
    return done


def _run(command: Sequence[str], *, timeout: float = 600) -> None:
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ModuleError(f"{' '.join(command)}: {error}") from error
    if result.returncode != 0:
        raise ModuleError(f"{' '.join(command)} failed: {(result.stderr or result.stdout).strip()[:400]}")


class HostDriver:
    """DriverHost on a real node (in the privileged driver container)."""

    def __init__(
        self,
        *,
        sys_root: Path,
        host_root: Path,
        runfile_dir: Path,
        module_type: str = "open",
        modprobe_root: Path | None = None,
    ) -> None:
        self.sys_root = sys_root
        self.host_root = host_root
        self.runfile_dir = runfile_dir
        self.module_type = module_type
        # A side-car's own root has no NVIDIA modules: it loads them from the driver's root (chroot).
        self.modprobe_root = modprobe_root

    def loaded(self) -> list[str]:
        return [m for m in UNLOAD_ORDER if (self.sys_root / "module" / m / "refcnt").exists()]

    def users(self, module: str) -> int:
        try:
            return int((self.sys_root / "module" / module / "refcnt").read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def unload(self, module: str) -> None:
        _run(["rmmod", module], timeout=120)

    def install(self, *, version: str, kernel: str) -> None:
        matches = sorted(self.runfile_dir.glob(f"NVIDIA-Linux-*-{version}.run"))
        if not matches:
            raise ModuleError(f"no installer for driver {version} in {self.runfile_dir}")
        kind = "kernel-open" if self.module_type == "open" else "kernel"
        _run(["sh", str(matches[0]), "--silent", "--no-questions", f"-m={kind}", f"--kernel-name={kernel}",
              "--skip-module-load", "--no-drm", "--no-nvidia-modprobe"], timeout=1800)  # fmt: skip

    def load(self, module: str) -> None:
        chroot = ["chroot", str(self.modprobe_root)] if self.modprobe_root is not None else []
        _run([*chroot, "modprobe", module], timeout=300)

    def host_driver_version(self) -> str | None:
        if shutil.which("chroot") is None:
            return None
        try:
            result = subprocess.run(
                ["chroot", str(self.host_root), "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        version = (
            result.stdout.strip().splitlines()[0].strip() if result.returncode == 0 and result.stdout.strip() else ""
        )
        return version or None

    def expose_root(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(root):
            # The whole container root, so /run/nvidia/driver/dev/nvidia0 and the libraries are where CDI looks.
            _run(["mount", "--rbind", "/", str(root)], timeout=60)

    def release_root(self, root: Path) -> None:
        if os.path.ismount(root):
            _run(["umount", "-l", "-R", str(root)], timeout=60)


class SimulatedDriver:
    """DriverHost on a simulated node: files under its host root and its simulated backend."""

    def __init__(
        self,
        *,
        host_root: Path,
        set_present: Callable[[bool], None],
        set_version: Callable[[str], None] | None = None,
        load_seconds: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.host_root = host_root
        self.set_present = set_present
        self.set_version = set_version
        self.load_seconds = load_seconds
        self.sleep = sleep
        self.version = ""

    def _module(self, module: str) -> Path:
        return self.host_root / "sys" / "module" / module.replace("-", "_")

    def loaded(self) -> list[str]:
        return [m for m in UNLOAD_ORDER if (self._module(m) / "refcnt").exists()]

    def users(self, module: str) -> int:
        try:
            return int((self._module(module) / "refcnt").read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def unload(self, module: str) -> None:
        shutil.rmtree(self._module(module), ignore_errors=True)
        if module == "nvidia":
            self.set_present(False)

    def install(self, *, version: str, kernel: str) -> None:
        # A fault the simulator injects: the install of this version (or any, when empty) fails.
        marker = self.host_root / FAIL_INSTALL_MARKER
        if marker.exists():
            wanted = marker.read_text(encoding="utf-8").strip()
            if not wanted or wanted == version:
                raise ModuleError(f"simulated install failure of driver {version} for kernel {kernel}")
        self.version = version
        if self.set_version is not None:
            self.set_version(version)

    def load(self, module: str) -> None:
        if self.load_seconds:
            self.sleep(self.load_seconds)  # a module load takes time on a real host too
        path = self._module(module)
        path.mkdir(parents=True, exist_ok=True)
        (path / "refcnt").write_text("0\n")
        if module == "nvidia":
            self.set_present(True)

    def host_driver_version(self) -> str | None:
        # A host-installed driver on a simulated node is a host-root nvidia-smi carrying its version.
        smi = self.host_root / "usr" / "bin" / "nvidia-smi"
        if not smi.exists():
            return None
        text = smi.read_text(encoding="utf-8", errors="replace")
        marker = "driver_version="
        return next((line.split("=", 1)[1].strip() for line in text.splitlines() if marker in line), "unknown")

    def expose_root(self, root: Path) -> None:
        # What the driver container's root holds that others read: the device nodes' names and the
        # user-space files of this version (the toolkit's CDI spec mounts them).
        for relative in (*SIMULATED_FILES, f"usr/lib/x86_64-linux-gnu/libcuda.so.{self.version}",
                         f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{self.version}"):  # fmt: skip
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"simulated NVIDIA driver {self.version}\n", encoding="utf-8")

    def release_root(self, root: Path) -> None:
        if root.is_dir():
            for child in root.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
