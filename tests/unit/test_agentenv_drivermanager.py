"""The driver pod's environment: driver manager, driver container, peermem side-car, driver host."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.drivermanager import driver, manager, peermem, steps
from gpu_operator.agents.drivermanager.manager import settings_from_env
from gpu_operator.agents.drivermanager.steps import DriverManagerError
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext

BAD_MANAGER = [
    ("EVICTION_TIMEOUT_SECONDS", "1e999", "not a duration from 1s to 24h"),
    ("DRAIN_TIMEOUT_SECONDS", "9" * 5000, "not a duration from 0s to 24h"),
    ("OPERAND_WAIT_SECONDS", "\u0663\u0660\u0660", "not a duration"),
    ("PREINSTALLED_WAIT_SECONDS", "inf", "not a duration"),
    ("EVICTION_POLL_SECONDS", "0", "not a duration from 10ms to 5m"),  # used to spin without a pause
    ("ENABLE_GPU_POD_EVICTION", "flase", "is not true or false"),  # used to turn eviction off
    ("ENABLE_AUTO_DRAIN", "yes please", "is not true or false"),
    ("DRAIN_POD_SELECTOR_LABEL", "app=x\nreboot", "is not a label selector"),
    ("DRAIN_POD_SELECTOR_LABEL", "app=" + "x" * 2000, "is not a label selector"),
    ("NODE_LABEL_FOR_GPU_POD_EVICTION", "nvidia.com/gpu.deploy.x=true", "is not a label key"),
    ("DRIVER_CONFIG_DIGEST", "d1\nFORCE", "is not a config digest"),
]


@pytest.mark.parametrize(("variable", "value", "says"), BAD_MANAGER)
def test_bad_manager_values_are_refused_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(DriverManagerError) as caught:
        settings_from_env({variable: value})
    assert isinstance(caught.value, ConfigRefusedError)  # gpu-operator agent prints one line, exits 1
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert says in message
    assert "\n" not in message
    assert len(message) < 200


def test_good_manager_values_as_before() -> None:
    env = {
        "EVICTION_TIMEOUT_SECONDS": "20",
        "DRAIN_TIMEOUT_SECONDS": "1m30s",
        "EVICTION_POLL_SECONDS": "500ms",
        "ENABLE_GPU_POD_EVICTION": "False",
        "DRAIN_POD_SELECTOR_LABEL": "app in (a, b),!skip,tier!=db",
        "NODE_LABEL_FOR_GPU_POD_EVICTION": "example.com/gpu-user",
        "DRIVER_CONFIG_DIGEST": "ab12",
    }
    s = settings_from_env(env)
    assert (s.eviction.timeout, s.eviction.interval, s.eviction.gpu_pod_eviction) == (90.0, 0.5, False)
    assert (s.eviction.drain_selector, s.custom_label, s.digest) == (
        "app in (a, b),!skip,tier!=db",
        "example.com/gpu-user",
        "ab12",
    )
    d = settings_from_env({})
    assert (d.eviction.timeout, d.eviction.interval, d.operand_wait, d.preinstalled_wait) == (300.0, 1.0, 300.0, 60.0)
    assert d.eviction.gpu_pod_eviction
    assert not d.eviction.auto_drain
    assert manager.seconds("90", name="X") == 90.0


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    return FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]),
                       env={"DRIVER_VERSION": "570.124.06", **env})  # fmt: skip


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("DRIVER_VERSION", "570.124.06\nrm -rf /", "is not a driver version"),
        ("DRIVER_VERSION", "../../../etc", "is not a driver version"),
        ("KERNEL_VERSION", "5.15/../../x", "is not a kernel release"),
        ("DRIVER_CONFIG_DIGEST", "a" * 500, "is not a config digest"),
        ("FORCE_REINSTALL", "sure", "is not true or false"),
        ("UNLOAD_ON_EXIT", "never", "is not true or false"),  # used to mean "unload"
        ("GDS_ENABLED", "enabled", "is not true or false"),
        ("SIMULATED_MODULE_LOAD_SECONDS", "inf", "not a duration"),
        ("KERNEL_MODULE_TYPE", "closed", "is not one of open, proprietary, auto"),
        ("DRIVER_RUNFILE_DIR", "drivers", "not an absolute path"),
    ],
)
def test_the_driver_container_refuses_before_writing_anything(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    ctx = _ctx(tmp_path, **{variable: value})
    with pytest.raises(ConfigRefusedError) as caught:
        asyncio.run(driver.main(ctx))
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert says in message
    assert "\n" not in message
    assert not any(tmp_path.rglob("*"))
    assert not ctx.ready


def test_good_driver_values_as_before(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, GDS_ENABLED="TRUE", UNLOAD_ON_EXIT="off", KERNEL_MODULE_TYPE="auto",
               SIMULATED_MODULE_LOAD_SECONDS="0.25")  # fmt: skip
    d = driver.Driver(ctx=ctx, host=steps.driver_host(ctx))
    assert (d.version, d.unload_on_exit, d.force_reinstall) == ("570.124.06", False, False)
    assert d.ready_content == "GDRCOPY_ENABLED=false\nGDS_ENABLED=true\nGPU_DIRECT_RDMA_ENABLED=false\n"
    assert steps.host_settings(ctx.env) == (0.25, "/drivers", "auto")


def test_peermem_values() -> None:
    assert [peermem.poll_seconds(t) for t in (None, "", "0.2", "3s")] == [2.0, 2.0, 0.2, 3.0]
    for bad in ("inf", "nan", "\u0662", "9" * 5000, "2h"):
        with pytest.raises(ConfigRefusedError, match=r"^PEERMEM_POLL_SECONDS: "):
            peermem.poll_seconds(bad)


def test_peermem_refuses_a_host_mofed_flag_that_is_not_one(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, USE_HOST_MOFED="yess")
    with pytest.raises(ConfigRefusedError, match=r'^USE_HOST_MOFED: "yess" is not true or false$'):
        asyncio.run(peermem.run(ctx))
