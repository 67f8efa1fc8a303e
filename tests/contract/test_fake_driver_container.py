"""The fake driver image's installer and module tools, run as the driver agent runs them.

The driver agent's real host backend (``HostDriver``) runs the image's ``NVIDIA-Linux-x86_64-<v>.run``
and ``modprobe``/``rmmod`` from ``PATH``, and reads loaded modules from the host's sysfs: here a host
root with a fake kernel's ``sys/module`` and the node's fake-GPU description. The installer lays the
driver of the version asked for, the modules come and go, and a host without fake GPUs, or a real
kernel, is refused with the file or module named.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_operator.agents.drivermanager.modules import HostDriver, ModuleError, unload_all
from gpu_operator.agents.shared.cdi import discover
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.sim.fakedriver.build import cached_build
from gpu_operator.sim.fakedriver.container import HARDWARE, PAYLOAD_DIR, hardware_text
from gpu_operator.sim.fakedriver.image import layer_tree
from gpu_operator.sim.fakedriver.install import FakeDriver
from tests.contract.fakenvml import REPO

OLD, NEW = "580.95.05", "595.91.07"
BROKEN = "590.48.01"  # built without its CUDA library: it loads, its validation fails


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = cached_build(checkout_root=REPO)
    tree = tmp_path_factory.mktemp("fake-driver-image")
    layer_tree(tree, build=build, versions=(OLD, NEW, BROKEN), broken=(BROKEN,))
    return tree


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "sys" / "module").mkdir(parents=True)
    (root / HARDWARE).parent.mkdir(parents=True)
    (root / HARDWARE).write_text(hardware_text(profile="a100-mig", node_name="n2"))
    return root


@pytest.fixture
def tool_env(image_tree: Path, host: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The image's PATH order: its /usr/local/sbin first, and a ``gpu-operator`` there to call."""
    path = f"{image_tree / 'usr' / 'local' / 'sbin'}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("HOST_ROOT", str(host))
    return {**os.environ, "PATH": path, "HOST_ROOT": str(host)}


def _runfile(image_tree: Path, version: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    runfile = image_tree / "drivers" / f"NVIDIA-Linux-x86_64-{version}.run"
    # The options HostDriver passes NVIDIA's installer.
    args = ["--silent", "--no-questions", "-m=kernel-open", "--kernel-name=6.8.0", "--skip-module-load"]
    # Then where this test's image tree has the container's / and the payload.
    args += ["--root", str(root), "--payload", str(image_tree / PAYLOAD_DIR.lstrip("/"))]
    return subprocess.run(["sh", str(runfile), *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_the_runfile_installs_its_version_for_the_hosts_gpus(
    image_tree: Path, host: Path, tool_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "container"
    result = _runfile(image_tree, OLD, root, tool_env)
    assert result.returncode == 0, result.stderr
    expected = FakeDriver.describe(root=root, profile=node_profile("a100-mig"), node_name="n2")
    assert f"installed under {root} for {len(expected.uuids)} GPU(s)" in result.stdout
    assert (root / "usr/lib/x86_64-linux-gnu" / f"libnvidia-ml.so.{OLD}").is_file()
    assert f"driver_version={OLD}\n" in (root / "lib/firmware/nvidia" / OLD / "fake-nvml.conf").read_text()
    assert sorted(p.name for p in (root / "dev").glob("nvidia[0-9]*")) == [f"nvidia{m}" for m in expected.minors]
    env = {**tool_env, "LD_LIBRARY_PATH": str(root / "usr/lib/x86_64-linux-gnu")}
    smi = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-L"], capture_output=True, text=True, timeout=30,
                         env=env, check=False)  # fmt: skip
    assert [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in smi.stdout.splitlines()] == list(expected.uuids)
    # The upgrade: the new version's description replaces the old one's.
    assert _runfile(image_tree, NEW, root, tool_env).returncode == 0
    assert sorted(p.name for p in (root / "lib/firmware/nvidia").iterdir()) == [NEW]


def test_a_broken_version_loads_but_leaves_no_cuda_library_for_validation_to_find(
    image_tree: Path, host: Path, tool_env: dict[str, str], tmp_path: Path
) -> None:
    """The canary e2e's bad driver: over a good one, it installs and ``nvidia-smi`` answers, but nothing
    of CUDA is left, so the CDI spec mounts none and the validator's CUDA check cannot load libcuda."""
    root = tmp_path / "container"
    libdir = root / "usr/lib/x86_64-linux-gnu"
    assert _runfile(image_tree, OLD, root, tool_env).returncode == 0
    assert (libdir / "libcuda.so.1").resolve().name == f"libcuda.so.{OLD}"
    result = _runfile(image_tree, BROKEN, root, tool_env)
    assert result.returncode == 0, result.stderr
    assert not [p.name for p in libdir.iterdir() if p.name.startswith("libcuda")]
    assert not [lib for lib in discover(root=root, version=BROKEN).libraries if "libcuda" in lib]
    env = {**tool_env, "LD_LIBRARY_PATH": str(libdir)}
    smi = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-L"], capture_output=True, text=True, timeout=30,
                         env=env, check=False)  # fmt: skip
    assert smi.returncode == 0, smi.stderr
    assert "UUID: " in smi.stdout
    # The rollback: the good version's installer brings CUDA back.
    assert _runfile(image_tree, OLD, root, tool_env).returncode == 0
    assert (libdir / "libcuda.so.1").resolve().name == f"libcuda.so.{OLD}"


def test_modules_load_and_unload_through_the_host_backend(
    image_tree: Path, host: Path, tool_env: dict[str, str]
) -> None:
    del tool_env  # PATH and HOST_ROOT set for this process: HostDriver runs modprobe as the agent does
    driver = HostDriver(sys_root=host / "sys", host_root=host, runfile_dir=image_tree / "drivers")
    assert driver.loaded() == []
    for module in ("nvidia", "nvidia-uvm", "nvidia-modeset"):
        driver.load(module)
    assert sorted(driver.loaded()) == ["nvidia", "nvidia_modeset", "nvidia_uvm"]
    assert unload_all(driver) == ["nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert driver.loaded() == []
    with pytest.raises(ModuleError, match="module nvidia is not currently loaded"):
        driver.unload("nvidia")


def test_no_fake_gpus_or_a_real_kernel_is_refused_by_name(
    image_tree: Path, host: Path, tool_env: dict[str, str], tmp_path: Path
) -> None:
    (host / HARDWARE).write_text("node=n2\n")
    result = _runfile(image_tree, OLD, tmp_path / "c", tool_env)
    assert result.returncode != 0
    assert f"{host / HARDWARE}: field 'profile' is missing" in result.stderr
    (host / HARDWARE).unlink()
    assert "no fake GPUs on this host" in _runfile(image_tree, OLD, tmp_path / "c", tool_env).stderr
    (host / "sys" / "module").rmdir()  # no fake kernel's sysfs to write
    probe = subprocess.run(["modprobe", "nvidia"], env=tool_env, capture_output=True, text=True, timeout=30,
                           check=False)  # fmt: skip
    assert probe.returncode != 0
    assert "this host's kernel is not the fake driver's" in probe.stderr
