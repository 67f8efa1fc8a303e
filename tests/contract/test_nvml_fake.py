"""NVML backend behaviour beyond the shared contract, over the fake library (each case in its own process).

Also the proof that the fake catches a backend relying on an entry point the library lacks.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.contract.conftest import RunPython

PRELUDE = "from gpu_operator.gpu.nvml import NvmlBackend\nfrom gpu_operator.gpu import nvml_lib\nimport ctypes\n"


def _ok(run_python: RunPython, code: str, **kw: object) -> str:
    result = run_python("-c", PRELUDE + code, **kw)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_missing_entry_point_fails_the_contract_loudly(
    build_fake_nvml: Callable[[Sequence[str]], Path], run_python: RunPython
) -> None:
    partial = build_fake_nvml(["nvmlDeviceGetUUID"])
    result = run_python("-m", "tests.contract.worker", "devices", "a100-mig", profile="a100-mig", libdir=partial)
    assert result.returncode == 1
    assert "NotSupportedError: nvmlDeviceGetUUID (GPU 0): Function Not Found" in result.stderr
    assert "lacks nvmlDeviceGetUUID" in result.stderr


def test_no_driver_is_gpu_not_found_and_auto_falls_back_to_null(run_python: RunPython) -> None:
    code = """
from gpu_operator.gpu import GpuNotFoundError, open_backend
try:
    NvmlBackend()
except GpuNotFoundError as exc:
    print("not found:", exc)
print("auto:", open_backend("auto").name, "refs:", nvml_lib.references())
"""
    out = _ok(run_python, code, profile=None)
    assert "not found: nvmlInit: Driver Not Loaded [NVML error 9]" in out
    assert "auto: null refs: 0" in out


def test_auto_picks_nvml_when_the_library_answers(run_python: RunPython) -> None:
    out = _ok(run_python, "from gpu_operator.gpu import open_backend\nprint(open_backend().name)")
    assert out.strip() == "nvml"


def test_nvml_is_initialised_once_per_process_and_shut_down_with_the_last_backend(run_python: RunPython) -> None:
    code = """
a, b = NvmlBackend(), NvmlBackend()
print(nvml_lib.references())
a.close(); a.close()
print(nvml_lib.references(), len(b.devices()))
b.close()
print(nvml_lib.references())
import pynvml
try:
    pynvml.nvmlDeviceGetCount()
except pynvml.NVMLError_Uninitialized:
    print("shut down")
"""
    assert _ok(run_python, code).split("\n")[:4] == ["2", "1 2", "0", "shut down"]


def test_xid_from_the_config_arrives_on_the_first_wait(run_python: RunPython) -> None:
    code = "b = NvmlBackend()\nprint([(e.xid, e.uuid == b.devices()[1].uuid) for e in b.wait_health_events(timeout=5)])"
    assert _ok(run_python, code, extra=["event.xid=1:48"]).strip() == "[(48, True)]"


def test_xid_on_a_mig_instance_carries_its_ids(run_python: RunPython) -> None:
    code = """
fake = ctypes.CDLL("libnvidia-ml.so.1")
b = NvmlBackend()
b.set_mig_mode(0, enabled=True); fake.fakeNvmlResetGpu(0)
mig = b.create_mig_devices(0, profiles=["3g.20gb", "3g.20gb"])[1]
b.wait_health_events(timeout=0)
fake.fakeNvmlInjectXid(0, ctypes.c_ulonglong(31), mig.gi_id, 0)
print([(e.xid, e.gi_id, e.ci_id) for e in b.wait_health_events(timeout=5)], mig.gi_id)
"""
    events, gi = _ok(run_python, code).strip().rsplit(" ", 1)
    assert events == f"[(31, {gi}, 0)]"


def test_unsupported_optional_queries_degrade_to_defaults(run_python: RunPython) -> None:
    code = """
d = NvmlBackend().devices()[0]
print(d.numa_node, d.compute_capability, d.architecture)
"""
    # numa_node=-1 makes the fake answer "not supported"; the architecture comes from nvmlDeviceGetArchitecture.
    assert _ok(run_python, code, extra=["device.0.numa_node=-1"]).strip() == "None (8, 0) ampere"


def test_close_wakes_a_thread_waiting_for_events(run_python: RunPython) -> None:
    code = """
import threading, time
b = NvmlBackend()
b.wait_health_events(timeout=0)
errors = []
def wait():
    try:
        b.wait_health_events(timeout=30)
    except Exception as exc:
        errors.append(str(exc))
t = threading.Thread(target=wait); t.start()
start = time.monotonic(); b.close(); t.join(10)
print(round(time.monotonic() - start) <= 2, errors)
"""
    assert _ok(run_python, code).strip() == "True ['NVML backend is closed']"


def test_auto_opens_nvml_once_the_driver_appears(run_python: RunPython) -> None:
    # An agent's container may start before the driver is loaded: auto answers as null, then NVML.
    code = """
import os
from gpu_operator.gpu import open_backend
from gpu_operator.gpu.reopening import ReopeningBackend
config = os.environ["FAKE_NVML_CONFIG"]
os.rename(config, config + ".later")  # no driver yet
backend = ReopeningBackend(open_nvml=lambda: open_backend("nvml"), retry_seconds=0)
count = len(backend.devices())
print("before:", backend.name, count)
os.rename(config + ".later", config)  # the driver container has loaded the driver
count = len(backend.devices())
print("after:", backend.name, count)
backend.close()
print("refs:", nvml_lib.references())
"""
    out = _ok(run_python, code)
    assert "before: null 0" in out
    assert "after: nvml 2" in out  # the a100-mig node's two GPUs
    assert "refs: 0" in out


def test_the_driver_library_is_found_under_the_driver_root(
    run_python: RunPython, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    # An agent image carries no driver: the validator and the plugin load the driver's own
    # libnvidia-ml.so.1 from the driver root on the host, seen through the host root mount.
    host = tmp_path / "host"
    libdir = host / "run" / "nvidia" / "driver" / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    shutil.copy(fake_nvml_dir / "libnvidia-ml.so.1", libdir / "libnvidia-ml.so.1")
    empty = tmp_path / "no-libraries"
    empty.mkdir()
    code = f"""
import os
os.environ["HOST_ROOT"] = {str(host)!r}
os.environ["DRIVER_INSTALL_DIR"] = "/run/nvidia/driver"
backend = NvmlBackend()
print("devices:", len(backend.devices()))
print("loaded:", [l for l in open("/proc/self/maps").read().split() if l.endswith("libnvidia-ml.so.1")][:1])
"""
    out = _ok(run_python, code, libdir=empty)
    assert "devices: 2" in out
    assert str(libdir / "libnvidia-ml.so.1") in out
