"""The CDI spec of a node's GPUs and MIG devices (kind ``nvidia.com/gpu``), as plain data; the toolkit
and the device plugin (its own kind) build theirs with it.

Devices are named by index (``"0"``; MIG ``"0:1"`` = GPU 0, its MIG device 1), by UUID (``GPU-...``,
``MIG-...``) and ``all``. Each carries its device nodes; what every GPU container needs (control
devices, driver libraries and binaries, the hooks that finish the library setup) is in the spec-wide
``containerEdits``. Host paths are prefixed with the driver or device root, container paths are not.
:func:`discover` finds those driver files: only those of the running version (a leftover library of an
older driver never gets mounted over a newer one), and never through a symlink inside the driver root
(what a crafted root would use to point a mount elsewhere: the CVE-2024-0132 lessons).

Every hook carries an explicit environment, ``PATH`` and ``NVIDIA_CTK_DEBUG`` only: an OCI runtime
runs a hook with exactly the ``env`` it is given, and a hook without one would inherit whatever the
runtime's process has, which for ``createContainer`` hooks is the container image's environment
(``LD_PRELOAD`` from the image loading attacker code into a privileged hook: CVE-2025-23266).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from gpu_operator.gpu.types import Device, MigDevice
from gpu_operator.names import keys

CDI_VERSION = "0.5.0"
KIND = keys.GPU_RESOURCE
HOOK_PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOOK_ENV = (f"PATH={HOOK_PATH_ENV}", "NVIDIA_CTK_DEBUG=false")
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
# /proc/driver/nvidia-caps/mig-minors: after "config" (1) and "monitor" (2), each GPU has 15 GPU
# instances of 1 access minor plus 8 compute-instance minors.
_CAPS_FIRST = 3
_CAPS_PER_GI = 9
_CAPS_PER_GPU = 15 * _CAPS_PER_GI


@dataclass(frozen=True, kw_only=True)
class DriverFiles:
    """Driver files found under the driver root, as container paths (the same paths inside)."""

    libraries: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()  # (target, link) to create in the container

    @property
    def library_dirs(self) -> tuple[str, ...]:
        return tuple(sorted({str(PurePosixPath(p).parent) for p in self.libraries}))


def mig_cap_minors(*, gpu_minor: int, gi_id: int, ci_id: int) -> tuple[int, int]:
    """The nvidia-caps minors granting access to GPU instance ``gi_id`` and its compute instance ``ci_id``."""
    gi = _CAPS_FIRST + gpu_minor * _CAPS_PER_GPU + gi_id * _CAPS_PER_GI
    return gi, gi + 1 + ci_id


def _host(root: str, path: str) -> str:
    return str(PurePosixPath(root) / path.lstrip("/"))


def _node(path: str, *, dev_root: str) -> dict[str, Any]:
    return {"path": path, "hostPath": _host(dev_root, path)}


def _gpu_nodes(device: Device, *, dev_root: str) -> list[dict[str, Any]]:
    minor = device.index if device.minor_number is None else device.minor_number
    return [_node(f"/dev/nvidia{minor}", dev_root=dev_root)]


def _mig_nodes(device: Device, mig: MigDevice, *, dev_root: str) -> list[dict[str, Any]]:
    minor = device.index if device.minor_number is None else device.minor_number
    gi, ci = mig_cap_minors(gpu_minor=minor, gi_id=mig.gi_id, ci_id=mig.ci_id)
    return [
        *_gpu_nodes(device, dev_root=dev_root),
        _node(f"/dev/nvidia-caps/nvidia-cap{gi}", dev_root=dev_root),
        _node(f"/dev/nvidia-caps/nvidia-cap{ci}", dev_root=dev_root),
    ]


def _hook(hook_path: str, *args: str) -> dict[str, Any]:
    return {
        "hookName": "createContainer",
        "path": hook_path,
        "args": [PurePosixPath(hook_path).name, *args],
        "env": list(HOOK_ENV),
    }


def _spec_edits(*, files: DriverFiles, driver_root: str, dev_root: str, hook_path: str) -> dict[str, Any]:
    edits: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [_node(p, dev_root=dev_root) for p in CONTROL_DEVICES],
    }
    if files.library_dirs:
        edits["env"].append(f"NVIDIA_CTK_LIBCUDA_DIR={files.library_dirs[0]}")
    mounts = [
        {"hostPath": _host(driver_root, p), "containerPath": p, "options": list(MOUNT_OPTIONS)}
        for p in (*files.libraries, *files.binaries, *files.firmware)
    ]
    if mounts:
        edits["mounts"] = mounts
    hooks = []
    if files.symlinks:
        links = [arg for target, link in files.symlinks for arg in ("--link", f"{target}::{link}")]
        hooks.append(_hook(hook_path, "create-symlinks", *links))
    if files.library_dirs:
        folders = [arg for folder in files.library_dirs for arg in ("--folder", folder)]
        hooks.append(_hook(hook_path, "update-ldcache", *folders))
    if hooks:
        edits["hooks"] = hooks
    return edits


def build_spec(
    *,
    devices: Sequence[Device],
    mig: Mapping[int, Sequence[MigDevice]],
    files: DriverFiles,
    driver_root: str,
    dev_root: str,
    hook_path: str,
    kind: str = KIND,
) -> dict[str, Any]:
    """The CDI spec for ``devices`` (and the MIG devices of each, by parent index)."""
    entries: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []
    for device in devices:
        nodes = _gpu_nodes(device, dev_root=dev_root)
        for name in (str(device.index), device.uuid):
            entries.append({"name": name, "containerEdits": {"deviceNodes": nodes}})
        every.extend(nodes)
        for instance in mig.get(device.index, ()):
            nodes = _mig_nodes(device, instance, dev_root=dev_root)
            for name in (f"{device.index}:{instance.index}", instance.uuid):
                entries.append({"name": name, "containerEdits": {"deviceNodes": nodes}})
            every.extend(n for n in nodes if n not in every)
    if every:
        entries.append({"name": "all", "containerEdits": {"deviceNodes": every}})
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": entries,
        "containerEdits": _spec_edits(files=files, driver_root=driver_root, dev_root=dev_root, hook_path=hook_path),
    }


def spec_file_name(kind: str = KIND) -> str:
    """``nvidia.com-gpu.json``: vendor and class joined by a dash, as CDI tools name spec files."""
    return kind.replace("/", "-") + ".json"


def render(spec: Mapping[str, Any]) -> str:
    """The spec as the file content: JSON, which runtimes and our stdlib-only wrapper both read."""
    return json.dumps(spec, indent=2, sort_keys=False) + "\n"


# --- the driver's files under the driver root ---------------------------------------------------

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64")
LIBRARIES = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-cfg.so",
    "libnvidia-allocator.so",
    "libnvidia-gpucomp.so",
    "libcudadebugger.so",
    "libnvidia-opencl.so",
)
# Libraries applications open by their soname (".so.1"), and libcuda also by its development name.
SONAME_LINKS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"libcuda.so": ("libcuda.so.1", "libcuda.so"), "libnvidia-ml.so": ("libnvidia-ml.so.1",)}
)
BINARY_DIRS = ("/usr/bin", "/usr/sbin", "/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
FIRMWARE_DIR = "/lib/firmware/nvidia"


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def discover(*, root: Path, version: str) -> DriverFiles:
    """The driver files of ``version`` under ``root`` (a directory standing for the driver's ``/``)."""
    libraries: list[str] = []
    links: list[tuple[str, str]] = []
    for directory in LIBRARY_DIRS:
        for name in LIBRARIES:
            candidate = root / directory.lstrip("/") / f"{name}.{version}"
            if not _regular(candidate):
                continue
            container_path = f"{directory}/{name}.{version}"
            if container_path in libraries:
                continue
            libraries.append(container_path)
            links.extend((f"{name}.{version}", f"{directory}/{link}") for link in SONAME_LINKS.get(name, ()))
    binaries = []
    for name in BINARIES:
        for directory in BINARY_DIRS:
            candidate = root / directory.lstrip("/") / name
            if _regular(candidate):
                binaries.append(f"{directory}/{name}")
                break
    firmware_dir = root / FIRMWARE_DIR.lstrip("/") / version
    firmware = [f"{FIRMWARE_DIR}/{version}"] if firmware_dir.is_dir() and not firmware_dir.is_symlink() else []
    return DriverFiles(
        libraries=tuple(libraries), binaries=tuple(binaries), firmware=tuple(firmware), symlinks=tuple(links)
    )
