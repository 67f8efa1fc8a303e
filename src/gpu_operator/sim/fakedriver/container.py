"""The fake driver installed by a driver container, as NVIDIA's driver image installs the real one.

A node of this shape (``nodes.node_setup(shape="driver-container")``) has fake GPUs and nothing of a
driver: its PCI tree shows the GPUs, its host's ``/lib/firmware/nvidia/fake-gpus.conf`` says which
catalog profile they are (:data:`HARDWARE`: the one thing our fake hardware cannot answer over PCI), and
its ``/sys/module`` is an overlay of its own, the fake kernel, since the machine's kernel loads no
modules. The fake driver image (``image``) carries, beside the operator's own agents:

- ``/drivers/NVIDIA-Linux-x86_64-<version>.run``: an installer the driver agent runs as it runs
  NVIDIA's, which calls :func:`install_in_container`: the fake driver of that version, for this node's
  GPUs, in the container's root (libraries, tools, GPU description) and its device nodes in the
  container's ``/dev`` (``nvidia-modprobe``'s part); the driver agent then exposes that root at
  ``/run/nvidia/driver`` as it does a real one;
- ``modprobe`` and ``rmmod`` in ``/usr/local/sbin`` (ahead of the real ones in ``PATH``), which call
  :func:`load_module`/:func:`unload_module`: a module is "loaded" while ``/sys/module/<name>/refcnt``
  exists in the host's sysfs, which the driver manager and the driver agent read through the host root.

On a real kernel these tools refuse with a clear error (sysfs cannot be written), so the fake image
can never pass for a driver on a real host.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from gpu_operator.sim.fakedriver.install import FakeDriver, install

#: The node's fake GPUs, on the host: ``profile=<catalog profile>``, ``node=<name GPU identities follow>``.
HARDWARE = "lib/firmware/nvidia/fake-gpus.conf"
#: Where the fake driver image keeps the compiled fake driver it installs.
PAYLOAD_DIR = "/usr/local/lib/fake-nvidia"
SYS_MODULE = "sys/module"


class FakeDriverError(Exception):
    """The fake driver could not be installed or a module not (un)loaded; the message says why."""


def hardware_text(*, profile: str, node_name: str) -> str:
    return f"profile={profile}\nnode={node_name}\n"


def read_hardware(host_root: Path) -> tuple[str, str]:
    """(profile, node name) of the host mounted at ``host_root`` (FakeDriverError names the file)."""
    path = host_root / HARDWARE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise FakeDriverError(f"{path}: no fake GPUs on this host ({error.strerror})") from error
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    profile = fields.get("profile", "").strip()
    if not profile:
        raise FakeDriverError(f"{path}: field 'profile' is missing")
    try:
        node_profile(profile)
    except (KeyError, ValueError) as error:
        raise FakeDriverError(f"{path}: field 'profile': {error}") from error
    return profile, fields.get("node", "").strip()


def install_in_container(*, version: str, root: Path, host_root: Path, payload: Path, cuda: bool = True) -> FakeDriver:
    """Install fake driver ``version`` for the host's fake GPUs under ``root`` (the container's ``/``);
    ``cuda=False``: a broken driver without its CUDA library (``install.install``)."""
    if not version:
        raise FakeDriverError("no driver version to install")
    profile_name, node_name = read_hardware(host_root)
    build = FakeDriverBuild(directory=payload)
    missing = [p.name for p in (build.library, build.cuda, build.smi, build.mps_control) if not p.is_file()]
    if missing:
        raise FakeDriverError(f"{payload}: the fake driver image lacks {', '.join(missing)}")
    profile = dataclasses.replace(node_profile(profile_name), driver_version=version)
    for old in (root / "lib" / "firmware" / "nvidia").glob("*/fake-nvml.conf"):
        if old.parent.name != version:  # a reinstall of another version replaces the old description
            shutil.rmtree(old.parent, ignore_errors=True)
    return install(root=root, build=build, profile=profile, node_name=node_name, cuda=cuda)


def _module_dir(host_root: Path, module: str) -> Path:
    return host_root / SYS_MODULE / module.replace("-", "_")


def load_module(*, host_root: Path, module: str) -> None:
    """``modprobe module`` on the fake kernel (idempotent, as modprobe is)."""
    path = _module_dir(host_root, module)
    try:
        path.mkdir(exist_ok=True)
        (path / "refcnt").write_text("0\n", encoding="ascii")
    except OSError as error:
        raise FakeDriverError(
            f"modprobe {module}: {path}: {error.strerror}: this host's kernel is not the fake driver's "
            "(the fake driver image only runs on nodes with a fake kernel)"
        ) from error


def unload_module(*, host_root: Path, module: str) -> None:
    """``rmmod module`` on the fake kernel; a module not loaded is an error, as rmmod says."""
    path = _module_dir(host_root, module)
    if not (path / "refcnt").exists():
        raise FakeDriverError(f"rmmod {module}: module {module.replace('-', '_')} is not currently loaded")
    shutil.rmtree(path)
