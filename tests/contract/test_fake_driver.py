"""The installed fake driver (``sim.fakedriver``): what a node's processes see of it, each in its own process.

An installed driver needs no environment: the library finds its GPU description from its own location,
shows only the GPUs whose device nodes exist, takes faults written by another process, and its
``nvidia-smi`` and ``libcuda`` answer from the same GPUs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from gpu_operator.sim.fakedriver.install import FakeDriver, install
from tests.contract import fakenvml
from tests.contract.fakenvml import REPO


@pytest.fixture
def driver(fake_nvml_dir: Path, tmp_path: Path) -> FakeDriver:
    build = FakeDriverBuild(directory=fake_nvml_dir)
    return install(root=tmp_path / "root", build=build, profile=node_profile("dgx-h100"), node_name="n1")


def _env(driver: FakeDriver) -> dict[str, str]:
    return fakenvml.env(libdir=driver.library.parent)  # how a container's loader finds the CDI-mounted files


def _python(driver: FakeDriver, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(driver), capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def _smi(driver: FakeDriver, *args: str) -> subprocess.CompletedProcess[str]:
    smi = driver.root / "usr" / "bin" / "nvidia-smi"
    return subprocess.run([str(smi), *args], env=_env(driver), capture_output=True, text=True, timeout=30, check=False)


def test_the_installed_library_finds_its_gpus_and_shows_only_those_with_device_nodes(driver: FakeDriver) -> None:
    listed = _smi(driver, "-L")
    assert listed.returncode == 0, listed.stderr
    assert [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in listed.stdout.splitlines()] == list(driver.uuids)

    driver.remove_device_node("nvidia3")  # as a container given every GPU but the fourth
    code = "from gpu_operator.gpu.nvml import NvmlBackend\nprint([d.uuid for d in NvmlBackend().devices()])"
    result = _python(driver, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([u for i, u in enumerate(driver.uuids) if i != 3])
    query = _smi(driver, "--query-gpu=index,uuid,memory.total", "--format=csv,noheader")
    assert query.stdout.splitlines()[3] == f"3, {driver.uuids[4]}, 81559 MiB"


def test_without_nvidiactl_the_driver_looks_unloaded_to_nvml_nvidia_smi_and_cuda(driver: FakeDriver) -> None:
    driver.remove_device_node("nvidiactl")
    smi = _smi(driver)
    assert smi.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in smi.stderr
    code = (
        "from gpu_operator.gpu import GpuNotFoundError\nfrom gpu_operator.gpu.nvml import NvmlBackend\n"
        "from gpu_operator.agents.validator.cuda import CudaError, real_cuda_check\n"
        "try:\n    NvmlBackend()\nexcept GpuNotFoundError as exc:\n    print('nvml:', exc)\n"
        "try:\n    real_cuda_check()\nexcept CudaError as exc:\n    print('cuda:', exc)\n"
    )
    out = _python(driver, code).stdout
    assert "nvml: nvmlInit: Driver Not Loaded" in out
    assert "cuda: cuInit failed: CUDA error 100: no CUDA-capable device is detected" in out


def test_cuda_runs_the_validators_vector_add_on_each_visible_gpu(driver: FakeDriver) -> None:
    driver.remove_device_node("nvidia7")
    code = "from gpu_operator.agents.validator.cuda import real_cuda_check\nprint(real_cuda_check())"
    result = _python(driver, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "vectorAdd passed on 7 CUDA device(s), CUDA 12.4"


def test_faults_written_by_another_process_reach_a_waiting_process(driver: FakeDriver) -> None:
    # The waiting process registers for XIDs, then (from a thread, like a host tool would from outside)
    # the fault lines are appended to the faults file; the wait must return them, the lost GPU must
    # answer "lost" and, after "recover", answer again.
    code = f"""
import threading, pynvml as nv
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(2)
s = nv.nvmlEventSetCreate()
nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, s)
def write(line):
    with open({str(driver.faults)!r}, "a") as f:
        f.write(line + "\\n")
threading.Thread(target=write, args=("xid {driver.uuids[2]} 79",)).start()
e = nv.nvmlEventSetWait_v2(s, 5000)
print("xid", e.eventData)
try:
    nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(2))
except nv.NVMLError as exc:
    print("after:", exc)
write("recover {driver.uuids[2]}")
print("count", nv.nvmlDeviceGetCount(), "uuid", nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(2)))
"""
    result = _python(driver, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["xid 79", "after: GPU is lost", f"count 8 uuid {driver.uuids[2]}"]


def test_a_later_process_sees_a_lost_gpu_but_not_old_xid_events(driver: FakeDriver) -> None:
    driver.inject_xid(uuid=driver.uuids[0], xid=48)
    driver.lose(uuid=driver.uuids[1])
    code = """
import pynvml as nv
nv.nvmlInit()
s = nv.nvmlEventSetCreate()
nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlEventTypeXidCriticalError, s)
try:
    nv.nvmlEventSetWait_v2(s, 300)
except nv.NVMLError as exc:
    print("wait:", exc)
try:
    nv.nvmlDeviceGetHandleByIndex(1)
except nv.NVMLError as exc:
    print("gpu 1:", exc)
"""
    assert _python(driver, code).stdout.splitlines() == ["wait: Timeout", "gpu 1: GPU is lost"]
    with pytest.raises(ValueError, match="not a GPU of the fake driver"):
        driver.lose(uuid="GPU-nope")


def test_mig_state_is_the_drivers_not_a_processs(fake_nvml_dir: Path, tmp_path: Path) -> None:
    # The MIG manager asks for MIG mode, nvidia-smi -r (another process) resets the GPU, the manager
    # creates an instance, and a third process (the plugin) sees it: state lives beside the driver.
    driver = install(root=tmp_path / "root", build=FakeDriverBuild(directory=fake_nvml_dir),
                     profile=node_profile("a100-mig"), node_name="n2")  # fmt: skip
    backend = "from gpu_operator.gpu.nvml import NvmlBackend\nb = NvmlBackend()\n"
    assert _python(driver, backend + "print(b.set_mig_mode(0, enabled=True))").stdout.strip() == "True"  # pending
    assert _smi(driver, "-r", "-i", "0").stdout.startswith("GPU 00000000:")
    created = _python(driver, backend + "b.create_mig_devices(0, profiles=['1g.5gb'])")
    assert created.returncode == 0, created.stderr
    look = (
        "from gpu_operator.gpu.nvml import NvmlBackend\nb = NvmlBackend()\n"
        "print([d.mig_enabled for d in b.devices()], [m.profile for m in b.mig_devices(0)])"
    )
    assert _python(driver, look).stdout.strip() == "[True, False] ['1g.5gb']"
