"""On a simulated node, NVIDIA's ``nvidia-peermem-ctr`` (``reload_nvidia_peermem``) is stood in for by our
peermem agent: with the simulated OFED container's ``.driver-ready`` and the driver's ``.driver-ctr-ready``
it loads nvidia-peermem on the node's simulated kernel; without MOFED it waits, not ready. No time passes:
the programs run until they wait (loop turns only)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from gpu_operator.agents.drivermanager.driver import CTR_READY
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.names import network
from gpu_operator.sim.programs.context import ProgramContext, Signals
from gpu_operator.sim.programs.launcher import Outcome, ProgramRun
from gpu_operator.sim.programs.netstandins import LOAD_SECONDS_FILE
from gpu_operator.sim.programs.programs import ProgramRegistry
from gpu_operator.sim.programs.standins import programs, standin_name

DRIVER_IMAGE = "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
OFED_IMAGE = "nvcr.io/nvidia/mellanox/doca-driver:25.04-0.6.1.0-2-ubuntu22.04-amd64"
PEERMEM = "nvidia-peermem-ctr"


class Started:
    """A stand-in started as the runtime starts one (NVIDIA's contract: no ``gpu-operator agent``)."""

    def __init__(self, host: Path, container: str, *, image: str, gpu: GpuBackend) -> None:
        registry = ProgramRegistry()
        for name, program in programs().items():
            registry.register_program(name, program)
        chosen = standin_name(container=container, command=(), args=())
        assert chosen is not None, container
        spec = registry.get(chosen)
        assert spec is not None
        self.readiness: list[bool] = []
        signals = Signals(loop=asyncio.get_running_loop(), on_ready=self.readiness.append)
        # The hostPath mounts NVIDIA's peermem and OFED containers have, at the node's directories.
        mounts = {p: host / p.lstrip("/") for p in ("/run/nvidia", network.DRIVERS_DIR)}
        ctx = ProgramContext(
            node_name="gpu-nic-0",
            namespace="gpu-operator",
            pod_name=f"{container}-pod",
            pod_uid="uid",
            container_name=container,
            program=chosen,
            argv=(image,),
            env={},
            host_root=host,
            plugin_dir=host / "dp",
            pod_resources_socket=host / "pr.sock",
            gpu=gpu,
            rootfs=host.parent / "rootfs" / container,
            mounts=mounts,
            signals=signals,
        )
        self.run = ProgramRun(spec=spec, ctx=ctx, signals=signals, label=container)

    async def until(self, condition: Callable[[], bool]) -> bool:
        """Let the programs run until ``condition`` (loop turns, no sleep; the agent's checks run in a
        thread, so a busy machine may need more turns: bounded by a generous deadline, never waited out)."""
        deadline = time.monotonic() + 10
        while not condition() and time.monotonic() < deadline:
            await asyncio.sleep(0)
        return condition()

    async def turns(self, count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    async def stop(self) -> Outcome:
        self.run.stop()
        return await self.run.outcome()


def _host(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    path = host / LOAD_SECONDS_FILE.lstrip("/")  # the simulated OFED container loads at once
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("0", encoding="utf-8")
    ready = host / CTR_READY.lstrip("/")  # what the driver container's stand-in writes once loaded
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_text("GPU_DIRECT_RDMA_ENABLED=true\n", encoding="utf-8")
    return host


def _gpu() -> SimulatedBackend:
    return SimulatedBackend(profile=NODE_PROFILES["pcie-l4"])


def test_the_peermem_standin_loads_the_module_once_ofed_is_ready(tmp_path: Path) -> None:
    host = _host(tmp_path)
    module = host / "sys/module/nvidia_peermem/refcnt"

    async def scenario() -> tuple[list[bool], list[bool], bool, Outcome]:
        ofed = Started(host, network.OFED_CONTAINER, image=OFED_IMAGE, gpu=NullBackend())
        assert await ofed.until(lambda: ofed.readiness == [True])
        peer = Started(host, PEERMEM, image=DRIVER_IMAGE, gpu=_gpu())
        loaded = await peer.until(module.exists)
        await peer.until(lambda: bool(peer.readiness))
        outcome = await peer.stop()
        await ofed.stop()
        return peer.readiness, ofed.readiness, loaded, outcome

    readiness, _, loaded, outcome = asyncio.run(scenario())
    assert loaded
    assert readiness[0] is True
    assert readiness[-1] is False  # stopped
    assert outcome.exit_code == 0


def test_the_peermem_standin_waits_without_ofed(tmp_path: Path) -> None:
    host = _host(tmp_path)
    mlx5 = host / "sys/module/mlx5_core"
    mlx5.mkdir(parents=True)  # an inbox RDMA stack: not MOFED's, so peermem must wait for .driver-ready

    async def scenario() -> tuple[list[bool], bool]:
        peer = Started(host, PEERMEM, image=DRIVER_IMAGE, gpu=_gpu())
        await peer.until(lambda: bool(peer.readiness))
        await peer.turns(2000)  # more turns: nothing more happens
        readiness = list(peer.readiness)
        await peer.stop()
        return readiness, (host / "sys/module/nvidia_peermem").exists()

    readiness, loaded = asyncio.run(scenario())
    assert readiness == [False]
    assert not loaded
