"""The driver program on a simulated node (install, load, readiness files, digest fast path, stop) and the
precompiled image tag chosen from the kernel version."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.drivermanager import driver
from gpu_operator.agents.drivermanager.driver import CTR_READY, DAEMONS_STATUS, Driver, DriverError
from gpu_operator.agents.drivermanager.modules import ModuleError, SimulatedDriver, unload_all
from gpu_operator.agents.drivermanager.precompiled import (
    branch,
    daemonset_suffix,
    image_tag,
    os_tag,
    precompiled_tag,
)
from gpu_operator.agents.drivermanager.steps import DRIVER_ROOT, STATE_FILE, driver_host
from gpu_operator.agents.shared import cdi
from gpu_operator.agents.shared.cdi import DriverFiles
from gpu_operator.gpu.backend import GpuNotFoundError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext

VERSION = "570.124.06"


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    backend = SimulatedBackend(profile=NODE_PROFILES["pcie-l4"])
    backend.set_present(False)  # a fresh node: no driver yet
    return FakeContext(
        root=tmp_path, gpu=backend, env={"DRIVER_VERSION": VERSION, "KERNEL_VERSION": "5.15.0-119-generic", **env}
    )


def test_driver_installs_loads_and_reports_ready(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, DRIVER_CONFIG_DIGEST="d1", GDS_ENABLED="true")
    ctx.stop_after = 1
    seen: dict[str, object] = {}
    original = ctx.sleep

    async def sleep(seconds: float | None) -> bool:
        seen["ready"] = ctx.ready
        seen["ctr_ready"] = ctx.path(CTR_READY).read_text()
        seen["version"] = ctx.gpu.driver_version()
        seen["files"] = cdi.discover(root=ctx.path(DRIVER_ROOT), version=VERSION)
        return await original(seconds)

    ctx.sleep = sleep  # type: ignore[method-assign]
    asyncio.run(driver.main(ctx))
    assert seen["ready"] is True
    assert seen["ctr_ready"] == "GDRCOPY_ENABLED=false\nGDS_ENABLED=true\nGPU_DIRECT_RDMA_ENABLED=false\n"
    assert seen["version"] == VERSION
    files = seen["files"]
    assert isinstance(files, DriverFiles)
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}" in files.libraries, "the toolkit's CDI spec finds them"
    assert ctx.path(STATE_FILE).read_text() == "d1\n"
    # Stopped: ready files gone, modules unloaded, GPUs gone with them.
    assert not ctx.path(CTR_READY).exists()
    assert not ctx.path(DAEMONS_STATUS).exists()
    assert not ctx.host_path("/sys/module/nvidia/refcnt").exists()
    with pytest.raises(GpuNotFoundError):
        ctx.gpu.devices()


def test_same_digest_keeps_the_loaded_modules(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, DRIVER_CONFIG_DIGEST="d1", UNLOAD_ON_EXIT="false")
    host = driver_host(ctx)
    assert isinstance(host, SimulatedDriver)
    first = Driver(ctx=ctx, host=host)
    assert first.start().endswith("and loaded")
    first.stop()
    assert "nvidia" in host.loaded()
    loads: list[str] = []
    original = host.load
    host.load = lambda module: loads.append(module) or original(module)  # type: ignore[method-assign, func-returns-value]
    assert Driver(ctx=ctx, host=host).start().endswith("user space only")
    assert loads == []
    ctx.env["FORCE_REINSTALL"] = "true"
    Driver(ctx=ctx, host=host).start()
    assert loads == ["nvidia", "nvidia-uvm", "nvidia-modeset"]


def test_rdma_leaves_peermem_to_its_side_car_and_a_missing_version_fails(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, GPU_DIRECT_RDMA_ENABLED="true")
    host = driver_host(ctx)
    Driver(ctx=ctx, host=host).start()
    # nvidia-peermem needs MOFED: the nvidia-peermem-ctr side-car loads it (test_peermem_agent).
    assert "nvidia_peermem" not in host.loaded()
    host.load("nvidia-peermem")
    ctx.host_path("/sys/module/nvidia_peermem/refcnt").write_text("1\n")
    with pytest.raises(ModuleError, match="cannot unload nvidia_peermem"):
        unload_all(host)
    ctx.env["DRIVER_VERSION"] = ""
    with pytest.raises(DriverError, match="DRIVER_VERSION is required"):
        Driver(ctx=ctx, host=host).start()


def test_simulated_load_takes_the_configured_time(tmp_path: Path) -> None:
    slept: list[float] = []
    host = SimulatedDriver(host_root=tmp_path, set_present=lambda _: None, load_seconds=2.5, sleep=slept.append)
    host.load("nvidia")
    host.load("nvidia-uvm")
    assert slept == [2.5, 2.5]
    assert host.loaded() == ["nvidia_uvm", "nvidia"]


@pytest.mark.parametrize(
    ("version", "kernel", "os_id", "version_id", "expected"),
    [
        ("550.54.15", "5.15.0-119-generic", "ubuntu", "22.04", "550-5.15.0-119-generic-ubuntu22.04"),
        ("535", "5.15.0-1063-nvidia", "ubuntu", "22.04", "535-5.15.0-1063-nvidia-ubuntu22.04"),
        ("570.124.06", "6.8.0-1017-nvidia", "ubuntu", "24.04", "570-6.8.0-1017-nvidia-ubuntu24.04"),
        ("550.90.07", "5.14.0-427.13.1.el9_4.x86_64", "rhel", "9.4", "550-5.14.0-427.13.1.el9_4.x86_64-rhel9"),
    ],
)
def test_precompiled_tag_from_kernel(version: str, kernel: str, os_id: str, version_id: str, expected: str) -> None:
    assert precompiled_tag(version=version, kernel=kernel, os=os_tag(os_id=os_id, version_id=version_id)) == expected


def test_tags_reject_what_cannot_be_a_tag() -> None:
    assert image_tag(version="550.54.15", os="ubuntu22.04") == "550.54.15-ubuntu22.04"
    assert branch("550.54.15") == "550"
    assert daemonset_suffix(kernel="5.14.0-427.13.1.el9_4.x86_64", os="rhel9") == "5-14-0-427-13-1-el9-4-x86-64-rhel9"
    for bad in ({"version": "r550", "kernel": "5.15.0-1-generic"}, {"version": "550", "kernel": "5.15 generic"}):
        with pytest.raises(ValueError, match="not a"):
            precompiled_tag(os="ubuntu22.04", **bad)
    with pytest.raises(ValueError, match="OS id and version"):
        os_tag(os_id="", version_id="22.04")
