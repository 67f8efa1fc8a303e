"""The ``nvidia-peermem`` agent (``nvidia-peermem-ctr``): it loads the module only once MOFED
(``/run/mellanox/drivers/.driver-ready``, or the host's mlx5_core with ``USE_HOST_MOFED``) and the driver
(``.driver-ctr-ready``) are both ready, loads it again after a reload took it, and reports ready as
NVIDIA's probe does. No sleeping: the context's ``sleep`` is the test's step function."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_operator.agents.drivermanager import modules, peermem
from gpu_operator.agents.drivermanager.driver import CTR_READY
from gpu_operator.agents.drivermanager.modules import HostDriver, ModuleError, SimulatedDriver
from gpu_operator.agents.drivermanager.peermem import MLX5_CORE, PeerMemory, poll_seconds
from gpu_operator.agents.drivermanager.steps import DRIVER_ROOT, driver_host
from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.names.network import DRIVER_READY
from tests.unit.fake_context import FakeContext

Step = Callable[[FakeContext], None]


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    return FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]), env=dict(env))


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("", encoding="utf-8")


def mofed_ready(ctx: FakeContext) -> None:
    _touch(ctx.path(DRIVER_READY))


def mofed_gone(ctx: FakeContext) -> None:
    ctx.path(DRIVER_READY).unlink()


def driver_ready(ctx: FakeContext) -> None:
    _touch(ctx.path(CTR_READY))


def mlx5_loaded(ctx: FakeContext) -> None:
    _touch(ctx.host_path(f"{MLX5_CORE}/refcnt"))


def peermem_unloaded(ctx: FakeContext) -> None:
    driver_host(ctx).unload("nvidia_peermem")  # what the driver's or MOFED's unload does


def _peermem_loaded(ctx: FakeContext) -> bool:
    return ctx.host_path("/sys/module/nvidia_peermem/refcnt").exists()


def _run(ctx: FakeContext, steps: list[Step]) -> list[tuple[bool, bool]]:
    """Run the agent; before each step (one per poll) record (module loaded, ready); stop after the last."""
    seen: list[tuple[bool, bool]] = []
    pending = list(steps)

    async def sleep(seconds: float | None) -> bool:
        seen.append((_peermem_loaded(ctx), ctx.ready))
        if not pending:
            return True
        pending.pop(0)(ctx)
        await asyncio.sleep(0)
        return False

    ctx.sleep = sleep  # type: ignore[method-assign]
    asyncio.run(peermem.main(ctx))
    assert PROGRAMS["nvidia-peermem"] is peermem.main
    return seen


def test_it_waits_for_both_mofed_and_the_driver_then_loads_the_module(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    seen = _run(ctx, [mlx5_loaded, driver_ready, mofed_ready])
    assert seen == [
        (False, True),  # no RDMA stack on the node yet: nothing to join, the driver pod is not held back
        (False, False),  # mlx5_core loaded (the OFED container starting): not ready without the module
        (False, False),  # the driver is ready, MOFED's .driver-ready is not there yet
        (True, True),  # both: loaded
    ]
    assert not ctx.ready, "stopped: not ready"
    assert _peermem_loaded(ctx), "the side-car never unloads the module itself"


def test_mofed_first_then_the_driver(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    mlx5_loaded(ctx)
    assert _run(ctx, [mofed_ready, driver_ready]) == [(False, False), (False, False), (True, True)]


def test_host_mofed_waits_for_the_hosts_mlx5_core_not_the_file(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, USE_HOST_MOFED="true")
    mofed_ready(ctx)  # a file left by a MOFED container counts for nothing with the host's MOFED
    seen = _run(ctx, [driver_ready, mlx5_loaded])
    assert seen == [(False, True), (False, True), (True, True)]


def test_a_reload_that_takes_the_module_is_followed_by_a_load_when_both_are_back(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for step in (mlx5_loaded, driver_ready, mofed_ready):
        step(ctx)

    def mofed_reloading(ctx: FakeContext) -> None:
        mofed_gone(ctx)
        peermem_unloaded(ctx)

    seen = _run(ctx, [mofed_reloading, mofed_ready, peermem_unloaded])
    assert seen == [
        (True, True),  # loaded at the first check
        (False, False),  # MOFED reloading: the module went with it, and it waits again
        (True, True),  # MOFED back: loaded again
        (True, True),  # a driver restart took it: loaded again at once (both files are there)
    ]


def test_a_failed_load_is_not_ready_and_is_tried_again(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for step in (mlx5_loaded, driver_ready, mofed_ready):
        step(ctx)
    host = driver_host(ctx)
    assert isinstance(host, SimulatedDriver)
    failures = [ModuleError("modprobe nvidia-peermem: Unknown symbol ib_register_peer_memory_client")]
    original = host.load

    def load(module: str) -> None:
        if failures:
            raise failures.pop()
        original(module)

    host.load = load  # type: ignore[method-assign]
    side_car = PeerMemory(ctx=ctx, host=host)
    with pytest.raises(ModuleError, match="Unknown symbol"):
        side_car.check()
    seen = side_car.check()
    assert seen.loaded
    assert seen.ready


def test_on_a_real_node_the_module_is_loaded_from_the_drivers_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend())
    ran: list[list[str]] = []

    def run(command: list[str], *, timeout: float = 600) -> None:
        ran.append(list(command))
        _touch(ctx.host_path("/sys/module/nvidia_peermem/refcnt"))  # what the real modprobe does

    monkeypatch.setattr(modules, "_run", run)
    host = driver_host(ctx, modprobe_root=DRIVER_ROOT)
    assert isinstance(host, HostDriver)
    for step in (mlx5_loaded, driver_ready, mofed_ready):
        step(ctx)
    assert PeerMemory(ctx=ctx, host=host).check().loaded
    assert ran == [["chroot", str(ctx.path(DRIVER_ROOT)), "modprobe", "nvidia-peermem"]]
    # The driver container's own host loads from its own root, as before.
    driver_host(ctx).load("nvidia")
    assert ran[-1] == ["modprobe", "nvidia"]


def test_the_poll_interval() -> None:
    assert poll_seconds(None) == 2.0
    assert poll_seconds("0.2") == 0.2
    for bad in ("soon", "0", "-1"):
        with pytest.raises(ValueError, match="PEERMEM_POLL_SECONDS"):
            poll_seconds(bad)
    assert peermem.DEFAULT_POLL_SECONDS == 2.0
