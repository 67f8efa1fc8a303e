"""The MPS control daemon agent over the fake driver's ``nvidia-cuda-mps-control`` (real processes).

With the device plugin's config sharing ``nvidia.com/gpu`` through MPS in 4 replicas, the agent starts
one daemon for that resource over the node's GPUs, gives each client a quarter (threads and pinned
memory), marks it ready for the plugin, starts it again when it stops answering, and on stop tells it to
quit and withdraws the marker. The config name comes from the node label, as the plugin's does.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_operator.agents.mps import program
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.sim.fakedriver.build import compile_into
from tests.contract.fakenvml import REPO
from tests.unit.fake_context import FakeContext, FakeNode

MPS_CONFIG = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_into(tmp_path_factory.mktemp("fake-driver-build"), checkout_root=REPO).directory


@pytest.fixture
def short_root() -> Iterator[Path]:
    """The host root: short, because the daemon's pipe directory under it holds a Unix socket (at most 107
    bytes of path), and pytest's tmp_path under an xdist worker is longer than that leaves room for."""
    root = Path(tempfile.mkdtemp(prefix="mps-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ctx(tools: Path, short_root: Path) -> FakeContext:
    tmp_path = short_root
    configs = tmp_path / "container" / "available-configs"
    configs.mkdir(parents=True)
    (configs / "mps-4").write_text(MPS_CONFIG)
    backend = SimulatedBackend(profile=node_profile("pcie-l4"), node_name="node-a")
    env = {
        "PATH": f"{tools}:/usr/bin:/bin",  # the runtime mounts the driver's tools into the container
        "CONFIG_FILE_SRCDIR": "/available-configs",
        "MPS_ROOT": "/mps",
        "NVIDIA_DRIVER_ROOT": "/",
    }
    return FakeContext(root=tmp_path, gpu=backend, env=env, node=FakeNode({"nvidia.com/device-plugin.config": "mps-4"}))


def _ask(tools: Path, pipe: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools / "nvidia-cuda-mps-control")], input=command + "\n", capture_output=True,
                          text=True, timeout=10, env={"CUDA_MPS_PIPE_DIRECTORY": str(pipe)}, check=False)  # fmt: skip


def test_one_daemon_per_mps_resource_with_equal_shares_restarted_and_stopped(ctx: FakeContext, tools: Path) -> None:
    state = program.Daemons(ctx)
    base = ctx.path("/mps") / "nvidia.com" / "gpu"
    pipe = base / "pipe"
    try:
        asyncio.run(state.step())
        assert (base / ".ready").read_text().strip().count("GPU-") == 4  # the L4 node's four GPUs
        assert _ask(tools, pipe, "get_default_active_thread_percentage").stdout.strip() == "25.0"
        memory = next(iter(ctx.gpu.devices())).memory_mib
        assert _ask(tools, pipe, "get_default_device_pinned_mem_limit 3").stdout.strip() == f"{memory // 4}M"

        _ask(tools, pipe, "quit")  # the daemon dies: the next step starts it again
        asyncio.run(state.step())
        assert _ask(tools, pipe, "get_default_active_thread_percentage").stdout.strip() == "25.0"
    finally:
        asyncio.run(state.stop_all())
    assert not (base / ".ready").exists()
    assert _ask(tools, pipe, "get_default_active_thread_percentage").returncode == 1  # no daemon left


def test_no_mps_sharing_means_no_daemon(ctx: FakeContext) -> None:
    assert ctx.node is not None
    ctx.node.values.clear()  # no config label, no default: the plugin shares nothing
    state = program.Daemons(ctx)
    asyncio.run(state.step())
    assert state.running == {}
    assert not (ctx.path("/mps") / "nvidia.com").exists()
