"""Laying out a fake NVIDIA driver under a driver root, and breaking it on purpose.

What an installed driver leaves on a node, made from a node profile of the simulator's catalog:

- ``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version>`` (the compiled fake, regular file) and its
  ``libnvidia-ml.so.1`` link: what the toolkit's and the plugin's CDI specs mount, what pynvml loads;
- ``usr/lib/x86_64-linux-gnu/libcuda.so.<version>``: the CUDA driver calls the validator makes, over
  the same GPUs (its one kernel, vector addition, runs on the CPU);
- ``usr/bin/nvidia-smi``: the fake tool, answering through that library, and
  ``usr/bin/nvidia-cuda-mps-control``: a fake MPS control daemon that keeps the limits it is given;
- ``lib/firmware/nvidia/<version>/fake-nvml.conf``: the GPU description. The library finds it from
  its own location, and CDI mounts the firmware folder into GPU containers, so a workload's library
  knows its GPUs with no extra mount or variable;
- ``dev/``: character device nodes made with mknod, as the driver's ``nvidia-modprobe`` makes them
  (``nvidia<minor>``, ``nvidiactl``, ``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-uvm-tools`` and, on
  MIG-capable GPUs, ``nvidia-caps/nvidia-cap<N>``). Nothing backs them: the kernel has no NVIDIA module,
  so only their presence counts. The library shows only the GPUs whose node exists under its root.

Faults go in at run time (:class:`FakeDriver`): XID events, lost and recovered GPUs and GPU resets
through the faults file the library polls, a broken library, a missing device node.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.shared.cdi import mig_cap_minors
from gpu_operator.gpu.catalog import NodeProfile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from gpu_operator.sim.fakedriver.config import config_lines

LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"
BINARY_DIR = "usr/bin"
CONFIG = "fake-nvml.conf"
FAULTS = "fake-nvml.faults"
NVIDIA_MAJOR = 195  # the real driver's fixed major number
UVM_MAJOR = 510  # dynamic on a real host (from /proc/devices); any free number serves here
CAPS_MAJOR = 511
_GPU_INSTANCES, _COMPUTE_INSTANCES = 15, 8


@dataclass(frozen=True, kw_only=True)
class FakeDriver:
    """An installed fake driver: its paths, its GPUs, and the faults it can be given."""

    root: Path
    version: str
    uuids: tuple[str, ...]
    minors: tuple[int, ...]
    mig_minors: tuple[int, ...] = ()

    @property
    def library(self) -> Path:
        return self.root / LIBRARY_DIR / f"libnvidia-ml.so.{self.version}"

    @property
    def cuda(self) -> Path:
        return self.root / LIBRARY_DIR / f"libcuda.so.{self.version}"

    @property
    def firmware_dir(self) -> Path:
        return self.root / "lib" / "firmware" / "nvidia" / self.version

    @property
    def config(self) -> Path:
        return self.firmware_dir / CONFIG

    @property
    def faults(self) -> Path:
        return self.firmware_dir / FAULTS

    @classmethod
    def describe(cls, *, root: Path, profile: NodeProfile, node_name: str = "", seed: int = 0) -> FakeDriver:
        """The driver of ``profile`` at ``root``: GPU identities as ``SimulatedBackend(profile, seed,
        node_name)`` gives them (nothing is written)."""
        sim = SimulatedBackend(profile=profile, seed=seed, node_name=node_name)
        try:
            devices = list(sim.devices())
        finally:
            sim.close()
        minors = tuple(d.index if d.minor_number is None else d.minor_number for d in devices)
        mig = tuple(m for d, m in zip(devices, minors, strict=True) if d.mig_capable)
        uuids = tuple(d.uuid for d in devices)
        return cls(root=root, version=profile.driver_version, uuids=uuids, minors=minors, mig_minors=mig)

    def device_node(self, name: str) -> Path:
        return self.root / "dev" / name

    # --- faults --------------------------------------------------------------------------------

    def _fault(self, line: str) -> None:
        with self.faults.open("a", encoding="utf-8") as out:  # one write of a whole line: read whole
            out.write(line + "\n")

    def inject_xid(self, *, uuid: str, xid: int) -> None:
        """An XID error on ``uuid`` (79, fallen off the bus, also makes it lost until :meth:`recover`)."""
        self._fault(f"xid {self._known(uuid)} {int(xid)}")

    def lose(self, *, uuid: str) -> None:
        self._fault(f"lost {self._known(uuid)}")

    def recover(self, *, uuid: str) -> None:
        self._fault(f"recover {self._known(uuid)}")

    def reset(self, *, uuid: str) -> None:
        """A GPU reset of ``uuid`` (what ``nvidia-smi -r`` records): it satisfies the recovery action an
        XID asked for, so NVML's recovery-action field reads NONE again in every process."""
        self._fault(f"reset {self._known(uuid)}")

    def break_library(self) -> None:
        """Move the library aside (a driver whose NVML is missing); :meth:`repair_library` undoes it."""
        self.library.rename(self.library.with_name(self.library.name + ".broken"))

    def repair_library(self) -> None:
        self.library.with_name(self.library.name + ".broken").rename(self.library)

    def remove_device_node(self, name: str) -> None:
        """Remove ``dev/<name>`` (``nvidiactl``: the driver looks unloaded; ``nvidia3``: GPU 3 is gone)."""
        self.device_node(name).unlink()

    def restore_device_nodes(self) -> None:
        make_device_nodes(root=self.root, minors=self.minors, mig_minors=self.mig_minors)

    def _known(self, uuid: str) -> str:
        if uuid not in self.uuids:
            raise ValueError(f"{uuid} is not a GPU of the fake driver at {self.root}")
        return uuid


def _mknod(path: Path, *, major: int, minor: int) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, 0o666)  # mknod applies the umask


def make_device_nodes(*, root: Path, minors: tuple[int, ...], mig_minors: tuple[int, ...]) -> None:
    """The driver's device nodes under ``root/dev`` (idempotent: existing ones are kept)."""
    dev = root / "dev"
    for minor in minors:
        _mknod(dev / f"nvidia{minor}", major=NVIDIA_MAJOR, minor=minor)
    _mknod(dev / "nvidiactl", major=NVIDIA_MAJOR, minor=255)
    _mknod(dev / "nvidia-modeset", major=NVIDIA_MAJOR, minor=254)
    _mknod(dev / "nvidia-uvm", major=UVM_MAJOR, minor=0)
    _mknod(dev / "nvidia-uvm-tools", major=UVM_MAJOR, minor=1)
    caps = {1, 2}  # MIG "config" and "monitor"
    for gpu_minor in mig_minors:
        for gi in range(_GPU_INSTANCES):
            for ci in range(_COMPUTE_INSTANCES):
                caps.update(mig_cap_minors(gpu_minor=gpu_minor, gi_id=gi, ci_id=ci))
    if mig_minors:
        for cap in sorted(caps):
            _mknod(dev / "nvidia-caps" / f"nvidia-cap{cap}", major=CAPS_MAJOR, minor=cap)


def install(
    *, root: Path, build: FakeDriverBuild, profile: NodeProfile, node_name: str = "", seed: int = 0, cuda: bool = True
) -> FakeDriver:
    """Install the fake driver of ``profile`` under ``root`` (the node's driver root, e.g. its
    ``/run/nvidia/driver``); GPU identities follow ``SimulatedBackend(profile, seed, node_name)``.
    ``cuda=False`` installs a broken driver without its CUDA library: it loads and ``nvidia-smi``
    answers, but the validator's CUDA check fails (a bad driver only validation catches)."""
    driver = FakeDriver.describe(root=root, profile=profile, node_name=node_name, seed=seed)
    libdir = root / LIBRARY_DIR
    libdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(build.library, driver.library)
    cuda_links = ("libcuda.so.1", "libcuda.so")
    if cuda:
        shutil.copyfile(build.cuda, driver.cuda)
    else:  # nothing of another version's CUDA library may stand in for the missing one
        for stale in (*libdir.glob("libcuda.so.*"), *(libdir / name for name in cuda_links)):
            stale.unlink(missing_ok=True)
    for target, links in ((driver.library, ("libnvidia-ml.so.1",)), (driver.cuda, cuda_links if cuda else ())):
        for name in links:  # the links ldconfig would make; CDI recreates them in each container
            (libdir / name).unlink(missing_ok=True)
            (libdir / name).symlink_to(target.name)
    bindir = root / BINARY_DIR
    bindir.mkdir(parents=True, exist_ok=True)
    for tool in (build.smi, build.mps_control):
        shutil.copyfile(tool, bindir / tool.name)
        (bindir / tool.name).chmod(0o755)
    driver.firmware_dir.mkdir(parents=True, exist_ok=True)
    # Like the real driver: processes see only the GPUs whose device nodes they have, and share MIG state.
    lines = [*config_lines(profile=profile, seed=seed, node_name=node_name), "device_nodes=1", "shared_state=1"]
    driver.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    driver.faults.write_text("", encoding="utf-8")
    driver.restore_device_nodes()
    return driver
