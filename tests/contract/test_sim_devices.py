"""The simulated kubelet's device manager over real sockets: the simulator's GPU plugin registers and allocates
over gRPC, PodResources lists the allocation, and plugins re-register after a kubelet restart. No cluster.

The in-process plugin path and the heartbeat loop are tested in ``tests/unit/test_sim_devices.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.kubelet.podresources import list_pod_resources
from gpu_operator.sim.kubelet.devices import DeviceManager
from gpu_operator.sim.kubelet.gpuplugin import RESOURCE, SOCKET_NAME, SimGpuPlugin
from tests.unit.test_sim_devices import Published, h100


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_grpc_registration_allocation_and_kubelet_restart(short_dir: Path) -> None:
    async def scenario() -> None:
        published = Published()
        dirs = KubeletDirs(root=short_dir)
        manager = DeviceManager(node_name="n1", dirs=dirs, on_capacity=published, serve=True)
        plugin = SimGpuPlugin(backend=h100())
        await manager.start()
        try:
            await plugin.serve(plugin_dir=dirs.plugin_dir)
            await published.until((8, 8))
            allocation = await manager.allocate(
                pod_uid="u1", namespace="ns", pod_name="a", container="c", resource=RESOURCE, count=3
            )
            assert len(allocation.device_ids) == 3
            [pod] = await list_pod_resources(socket=dirs.pod_resources_socket)
            assert pod.containers[0].devices[0].device_ids == allocation.device_ids

            await manager.restart_kubelet()
            assert not (dirs.plugin_dir / SOCKET_NAME).exists()  # every plugin socket removed
            assert published.values[-1] == {RESOURCE: (8, 0)}  # capacity kept, nothing allocatable
            await plugin.restart()
            await published.until((8, 8))
            assert manager.registrations == 2
            assert manager.allocations(pod_uid="u1", container="c") == [allocation]  # kept across the restart
        finally:
            await plugin.stop()
            await manager.stop()

    asyncio.run(scenario())
