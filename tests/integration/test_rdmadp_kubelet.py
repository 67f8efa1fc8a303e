"""The RDMA shared device plugin program and ``netplugin`` against the simulator's kubelet device manager.

Real gRPC over unix sockets, no cluster: the agent program runs on a simulated NIC tree (``nic.simulated``)
with a context whose ``sleep`` really waits. Checked: rdmaHcaMax devices advertised (0 when nothing
matches), Allocate answers upstream's device specs, re-discovery pushes a new list, a kubelet restart is
followed by re-registration; and the generic loop: a failing loader keeps the previous sources, a removed
source stops its server, ids that were never advertised are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.rdmadp.program import main
from gpu_operator.agents.shared.netplugin import AllocateError, PluginRunner
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.null import NullBackend
from gpu_operator.kubelet.allocation import ContainerAllocation, PluginDevice
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.kubelet.plugin_client import DevicePluginClient, DevicePluginError
from gpu_operator.nic.simulated import write_nic_tree
from gpu_operator.sim.kubelet.devices import AdmissionError, DeviceManager

Capacity = dict[str, tuple[int, int] | None]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rdp-", dir="/tmp"))  # unix socket paths must stay short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Published:
    """The capacities the device manager publishes; ``until`` waits (with a deadline) for a predicate."""

    def __init__(self) -> None:
        self.last: Capacity = {}
        self._changed = asyncio.Condition()

    async def __call__(self, capacity: Capacity) -> None:
        async with self._changed:
            self.last = capacity
            self._changed.notify_all()

    async def until(self, expected: Mapping[str, tuple[int, int]], timeout: float = 10.0) -> None:
        def done() -> bool:
            return all(self.last.get(k) == v for k, v in expected.items())

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(done), timeout)
            except TimeoutError:
                raise AssertionError(f"capacity {self.last}, expected {dict(expected)}") from None


@dataclass
class NodeContext:
    """An AgentContext for one simulated node whose ``sleep`` really waits."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    node_name: str = "nic-node"
    node: None = None
    ready: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    gpu: GpuBackend = field(default_factory=lambda: NullBackend(reason="NIC node"))

    @property
    def plugin_dir(self) -> Path:
        return KubeletDirs(root=self.root).plugin_dir

    def path(self, container_path: str) -> Path:
        return self.root / "container" / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.ready = ready

    async def sleep(self, seconds: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def _write_config(ctx: NodeContext, config: object) -> None:
    path = ctx.path("/k8s-rdma-shared-dev-plugin/config.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config), encoding="utf-8")


CONFIG = {
    "periodicUpdateInterval": 1,
    "configList": [
        {"resourceName": "hca_ib", "rdmaHcaMax": 5, "selectors": {"vendors": ["15b3"], "linkTypes": ["infiniband"]}},
        {"resourceName": "hca_intel", "rdmaHcaMax": 3, "selectors": {"vendors": ["8086"]}},
    ],
}
IB, INTEL = "rdma/hca_ib", "rdma/hca_intel"


def test_rdma_shared_plugin_on_a_simulated_kubelet(short_dir: Path) -> None:
    async def scenario() -> None:
        published = Published()
        ctx = NodeContext(root=short_dir, env={"NIC_NETLINK": "false"})
        manager = DeviceManager(node_name="n1", dirs=KubeletDirs(root=short_dir), on_capacity=published, serve=True)
        write_nic_tree(root=short_dir, model="cx6", count=2)  # two InfiniBand HCAs, mlx5_0 and mlx5_1
        _write_config(ctx, CONFIG)
        await manager.start()
        task = asyncio.create_task(main(ctx))
        try:
            await published.until({IB: (5, 5), INTEL: (0, 0)})  # nothing matches hca_intel: 0 devices
            await _until(lambda: ctx.ready)

            first = await manager.allocate(
                pod_uid="u1", namespace="ns", pod_name="a", container="c", resource=IB, count=2
            )
            second = await manager.allocate(
                pod_uid="u2", namespace="ns", pod_name="b", container="c", resource=IB, count=3
            )
            specs = [(d.host_path, d.container_path, d.permissions) for d in first.devices]
            paths = [
                "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0",
                "/dev/infiniband/issm1", "/dev/infiniband/umad1", "/dev/infiniband/uverbs1",
            ]  # fmt: skip
            assert specs == [(p, p, "rwm") for p in paths]  # both HCAs, rdma_cm once
            assert second.devices == first.devices  # shared: every container gets the same HCAs
            assert not first.envs
            assert not first.mounts
            with pytest.raises(AdmissionError):
                await manager.allocate(
                    pod_uid="u3", namespace="ns", pod_name="c", container="c", resource=INTEL, count=1
                )

            registrations = manager.registrations
            await manager.restart_kubelet()
            assert published.last[IB] == (5, 0)  # capacity kept, nothing allocatable until the plugin is back
            await published.until({IB: (5, 5), INTEL: (0, 0)})
            assert manager.registrations == registrations + 2  # both resources registered again
            await _until(lambda: ctx.ready)

            # Re-discovery (every second): the InfiniBand NICs' umad devices disappear -> incomplete -> 0.
            for umad in (short_dir / "dev/infiniband").glob("umad*"):
                umad.unlink()
            await published.until({IB: (0, 0)})
        finally:
            ctx.stop.set()
            await asyncio.wait_for(task, 10)
            await manager.stop()
        assert not list(ctx.plugin_dir.glob("hca_*.sock"))  # its sockets are removed on the way out

    asyncio.run(scenario())


@dataclass
class StubSource:
    resource_name: str
    endpoint: str
    ids: list[str]

    def devices(self) -> Sequence[PluginDevice]:
        return [PluginDevice(id=i) for i in self.ids]

    def allocate(self, *, device_ids: Sequence[str]) -> ContainerAllocation:
        if "bad" in device_ids:
            raise AllocateError("bad is never handed out")
        return ContainerAllocation(
            resource_name=self.resource_name, device_ids=tuple(device_ids), envs={"IDS": ",".join(device_ids)}
        )


def test_serve_loop_keeps_sources_through_failures(short_dir: Path) -> None:
    async def scenario() -> None:
        published = Published()
        ctx = NodeContext(root=short_dir)
        dirs = KubeletDirs(root=short_dir)
        manager = DeviceManager(node_name="n1", dirs=dirs, on_capacity=published, serve=True)
        a = StubSource(resource_name="example.com/a", endpoint="a.sock", ids=["x", "y"])
        b = StubSource(resource_name="example.com/b", endpoint="b.sock", ids=["bad", "z"])
        answers: list[object] = [RuntimeError("config broken"), [a, b], RuntimeError("broken again"), [b]]

        def load() -> Sequence[StubSource]:
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]

        # A refresh far away: each load below is asked for (``_next_load``), so a slow tick never loads early.
        runner = PluginRunner(ctx=ctx, load=load, refresh_seconds=3600, name="stub")
        await manager.start()
        try:
            await runner.tick()  # the first load fails: nothing served, not ready
            assert not runner.servers
            assert not ctx.ready
            assert runner.last_error is not None
            assert "config broken" in runner.last_error
            runner._next_load = 0.0
            await runner.tick()
            await published.until({"example.com/a": (2, 2), "example.com/b": (2, 2)})
            assert ctx.ready
            assert runner.registrations == 2

            a.ids.append("w")  # a source may change its list on its own: pushed on the next tick
            await runner.tick()
            await published.until({"example.com/a": (3, 3)})

            client = DevicePluginClient(socket=dirs.plugin_dir / "b.sock", resource_name="example.com/b")
            try:
                assert (await client.allocate(device_ids=["z"])).envs == {"IDS": "z"}
                with pytest.raises(DevicePluginError, match=r"INVALID_ARGUMENT.*never handed out"):
                    await client.allocate(device_ids=["bad"])
                with pytest.raises(DevicePluginError, match=r"INVALID_ARGUMENT.*unknown device ids"):
                    await client.allocate(device_ids=["nope"])
            finally:
                await client.close()

            runner._next_load = 0.0
            await runner.tick()  # the loader fails again: both keep serving
            assert set(runner.servers) == {("example.com/a", "a.sock"), ("example.com/b", "b.sock")}
            assert "broken again" in (runner.last_error or "")
            runner._next_load = 0.0
            await runner.tick()  # a is no longer loaded: its server stops, the kubelet's stream ends
            await published.until({"example.com/a": (3, 0), "example.com/b": (2, 2)})
            assert not (dirs.plugin_dir / "a.sock").exists()
        finally:
            await runner.close()
            await manager.stop()

    asyncio.run(scenario())
