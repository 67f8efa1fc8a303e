"""The SR-IOV device plugin agent against the simulator's kubelet device manager over real gRPC sockets,
on a simulated NIC tree with VFs (no cluster): ListAndWatch advertises the VFs, Allocate answers with the
``PCIDEVICE_*`` environment and RDMA device specs and leaves the device-info file for the CNI, and a
kubelet restart is followed by re-registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.sriovdp import program
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.nic.simulated import SimNic, write_nic_tree
from gpu_operator.sim.kubelet.devices import DeviceManager

RESOURCE = "nvidia.com/sriov_rdma"
CONFIG = {
    "resourceList": [
        {
            "resourcePrefix": "nvidia.com",
            "resourceName": "sriov_rdma",
            "selectors": {"vendors": ["15b3"], "devices": ["101e"], "isRdma": True},
        }
    ]
}
VFS = ("0000:18:00.2", "0000:18:00.3", "0000:18:01.2", "0000:18:01.3")


@dataclass
class Context:
    """The AgentContext of one agent container: node files under ``root``, stop by ``stopping``."""

    root: Path
    plugin_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    node_name: str = "n1"
    node: None = None
    ready: bool = False
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def gpu(self) -> GpuBackend:
        raise AssertionError("the SR-IOV plugin never asks for GPUs")

    def path(self, container_path: str) -> Path:
        return self.root / "container" / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / "host" / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.ready = ready

    async def sleep(self, seconds: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()


class Published:
    def __init__(self) -> None:
        self.last: dict[str, tuple[int, int] | None] = {}
        self.changed = asyncio.Condition()

    async def __call__(self, capacity: dict[str, tuple[int, int] | None]) -> None:
        async with self.changed:
            self.last = capacity
            self.changed.notify_all()

    async def until(self, expected: tuple[int, int]) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.last.get(RESOURCE) == expected), 15)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay under 108 bytes: a short directory in /tmp."""
    path = Path(tempfile.mkdtemp(prefix="sr-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(60)
def test_sriov_plugin_advertises_vfs_and_allocates(short_dir: Path) -> None:
    async def scenario() -> None:
        dirs = KubeletDirs(root=short_dir / "k")
        published = Published()
        manager = DeviceManager(node_name="n1", dirs=dirs, on_capacity=published, serve=True)
        ctx = Context(root=short_dir / "n", plugin_dir=dirs.plugin_dir, env={"NIC_NETLINK": "false"})
        write_nic_tree(root=ctx.host_path("/"), nics=[SimNic(model="cx6dx", bus=0x18, num_vfs=2)])
        config = ctx.path("/etc/pcidp/config.json")
        config.parent.mkdir(parents=True)
        config.write_text(json.dumps(CONFIG))
        await manager.start()
        agent = asyncio.create_task(program.main(ctx))
        try:
            await published.until((4, 4))  # the four VFs; both PFs (VFs configured) are not advertised
            allocation = await manager.allocate(
                pod_uid="u1", namespace="ns", pod_name="p", container="c", resource=RESOURCE, count=2
            )
            ids = allocation.device_ids
            assert set(ids) <= set(VFS)
            assert len(ids) == 2
            assert allocation.envs["PCIDEVICE_NVIDIA_COM_SRIOV_RDMA"] == ",".join(ids)
            info = json.loads(allocation.envs["PCIDEVICE_NVIDIA_COM_SRIOV_RDMA_INFO"])
            assert sorted(info) == sorted(ids)
            rdma = info[ids[0]]["rdma"]
            assert rdma["rdma_cm"] == "/dev/infiniband/rdma_cm"
            assert rdma["rdma_dev"].startswith("mlx5_")
            paths = {d.host_path for d in allocation.devices}
            assert "/dev/infiniband/rdma_cm" in paths
            assert rdma["uverbs"] in paths
            devinfo = ctx.path("/var/run/k8s.cni.cncf.io/devinfo/dp") / f"nvidia.com-sriov_rdma-{ids[0]}-device.json"
            assert json.loads(devinfo.read_text()) == {
                "type": "pci",
                "version": "1.1.0",
                "pci": {"pci-address": ids[0], "rdma-device": rdma["rdma_dev"]},
            }
            assert ctx.ready

            await manager.restart_kubelet()  # sockets removed: the agent must serve and register again
            await published.until((4, 4))
            assert manager.registrations == 2
        finally:
            ctx.stopping.set()
            await asyncio.wait_for(agent, 10)
            await manager.stop()
        assert not devinfo.exists()  # removed when the plugin stops, as upstream's server does
        assert list(dirs.plugin_dir.glob("*.sock")) == []

    asyncio.run(scenario())
