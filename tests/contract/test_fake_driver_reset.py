"""GPU resets on the installed fake driver, across processes: an XID asks for a reset (NVML's recovery
action field), ``nvidia-smi -r`` in another process answers it, and a waiting NVML backend reports the
GPU recovered; the ``fake-driver fault`` command records the same faults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_operator.cli.fakedriver import fake_driver_group
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from gpu_operator.sim.fakedriver.install import FakeDriver, install
from tests.contract import fakenvml
from tests.contract.fakenvml import REPO

WATCH = """
import time
from gpu_operator.gpu.nvml import NvmlBackend
b = NvmlBackend()
b.wait_health_events(timeout=0)
print("ready", flush=True)
seen, deadline = 0, time.monotonic() + 30
while seen < 2 and time.monotonic() < deadline:
    for e in b.wait_health_events(timeout=1):
        seen += 1
        print(e.uuid, e.xid, e.recovered, e.reset, flush=True)
"""
FIELD = """
import pynvml as nv
nv.nvmlInit()
v = nv.nvmlDeviceGetFieldValues(nv.nvmlDeviceGetHandleByIndex(0), [nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
print(v.value.uiVal)
"""


@pytest.fixture
def driver(fake_nvml_dir: Path, tmp_path: Path) -> FakeDriver:
    build = FakeDriverBuild(directory=fake_nvml_dir)
    return install(root=tmp_path / "root", build=build, profile=node_profile("pcie-l4"), node_name="n1")


def _env(driver: FakeDriver) -> dict[str, str]:
    return fakenvml.env(libdir=driver.library.parent)


def _field(driver: FakeDriver) -> str:
    result = subprocess.run([sys.executable, "-c", FIELD], env=_env(driver), capture_output=True, text=True,
                            timeout=30, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_nvidia_smi_reset_in_another_process_recovers_the_gpu_for_a_waiting_backend(driver: FakeDriver) -> None:
    uuid = driver.uuids[0]
    with subprocess.Popen([sys.executable, "-c", WATCH], cwd=REPO, env=_env(driver), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as watcher:  # fmt: skip
        _watch_reset(driver, watcher, uuid)


def _watch_reset(driver: FakeDriver, watcher: subprocess.Popen[str], uuid: str) -> None:
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().strip() == "ready"
        driver.inject_xid(uuid=uuid, xid=48)
        assert watcher.stdout.readline().split() == [uuid, "48", "False", "False"]
        assert _field(driver) == "1", "a later process sees the reset the XID asked for (GPU_RESET)"
        smi = subprocess.run([str(driver.root / "usr/bin/nvidia-smi"), "-r", "-i", "0"], env=_env(driver),
                             capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert smi.returncode == 0, smi.stderr
        assert watcher.stdout.readline().split() == [uuid, "None", "True", "True"]
        assert _field(driver) == "0"
    finally:
        watcher.kill()
        watcher.wait(timeout=10)


def test_the_fault_command_records_resets_and_xids(driver: FakeDriver) -> None:
    uuid = driver.uuids[0]
    runner = CliRunner()
    root = str(driver.root)
    assert runner.invoke(fake_driver_group, ["fault", "xid", uuid, "74", "--root", root]).exit_code == 0
    assert _field(driver) == "1"
    result = runner.invoke(fake_driver_group, ["fault", "reset", uuid, "--root", root])
    assert result.exit_code == 0, result.output
    assert _field(driver) == "0"
    assert driver.faults.read_text().splitlines()[-2:] == [f"xid {uuid} 74", f"reset {uuid}"]
    assert runner.invoke(fake_driver_group, ["fault", "xid", uuid, "--root", root]).exit_code == 2
    unknown = runner.invoke(fake_driver_group, ["fault", "lost", "GPU-nope", "--root", root])
    assert unknown.exit_code == 1
    assert "not a GPU of a fake driver" in unknown.output
