"""The simulated kubelet's device manager with an in-process plugin (allocation, health, admission), and the
shared heartbeat loop's scheduling. No cluster, no socket.

Registration and allocation over real gRPC, and kubelet restarts, are in ``tests/contract/test_sim_devices.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.sim.kubelet.devices import AdmissionError, DeviceManager
from gpu_operator.sim.kubelet.gpuplugin import RESOURCE, SimGpuPlugin
from gpu_operator.sim.kubelet.heartbeat import Beat, Heartbeat


class Published:
    """Records the capacities the manager publishes; ``until`` awaits one (with a deadline, no sleeping)."""

    def __init__(self) -> None:
        self.values: list[dict[str, tuple[int, int] | None]] = []
        self._changed = asyncio.Condition()

    async def __call__(self, capacity: dict[str, tuple[int, int] | None]) -> None:
        async with self._changed:
            self.values.append(capacity)
            self._changed.notify_all()

    async def until(self, expected: tuple[int, int]) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: bool(self.values) and self.values[-1].get(RESOURCE) == expected), 10
            )


def h100() -> SimulatedBackend:
    return SimulatedBackend(profile=node_profile("dgx-h100"), node_name="n1")


def test_local_plugin_allocation_and_health(tmp_path: Path) -> None:
    async def scenario() -> None:
        published = Published()
        backend = h100()
        plugin = SimGpuPlugin(backend=backend)
        manager = DeviceManager(node_name="n1", dirs=KubeletDirs(root=tmp_path), on_capacity=published, serve=False)
        await manager.attach_local(plugin)
        assert published.values[-1] == {RESOURCE: (8, 8)}
        first = await manager.allocate(
            pod_uid="u1", namespace="ns", pod_name="a", container="c", resource=RESOURCE, count=2
        )
        assert first.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(first.device_ids)
        assert first.cdi_devices[0].startswith("k8s.device-plugin.nvidia.com/gpu=GPU-")
        backend.lose_gpu(7)
        assert plugin.drain_events()
        await manager.refresh_local()
        assert published.values[-1] == {RESOURCE: (8, 7)}
        with pytest.raises(AdmissionError, match="Requested: 6, Available: 5"):
            await manager.allocate(
                pod_uid="u2", namespace="ns", pod_name="b", container="c", resource=RESOURCE, count=6
            )
        [pod] = manager.pod_devices()
        assert (pod.name, pod.containers[0].devices[0].device_ids) == ("a", first.device_ids)
        manager.release("u1")
        assert manager.pod_devices() == []
        assert len(manager.allocatable_devices()[0].device_ids) == 7
        backend.recover_gpu(7)
        plugin.drain_events()
        await manager.refresh_local()
        assert published.values[-1] == {RESOURCE: (8, 8)}

    asyncio.run(scenario())


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> dict[str, Any]:
        self.calls.append((path, kind))
        return {}


def test_heartbeat_schedules_leases_and_statuses() -> None:
    async def scenario() -> FakeApi:
        api = FakeApi()
        heartbeat = Heartbeat(api=api, lease_interval=10, status_interval=40)
        for name in ("a", "b"):
            heartbeat.add(Beat(name=name, status_body=lambda now: {"status": {}}), now=0.0)
        assert heartbeat.due(4.9) == ([], [])  # first renewals are spread over half to one interval
        leases, statuses = heartbeat.due(10.0)
        assert (sorted(b.name for b in leases), statuses) == (["a", "b"], [])
        assert heartbeat.due(19.9) == ([], [])
        beat_b = heartbeat.get("b")
        assert beat_b is not None
        beat_b.beating = False  # a heartbeat-loss fault
        heartbeat.status_now("a")
        await heartbeat.beat_once(20.0)
        return api

    api = asyncio.run(scenario())
    assert api.calls == [
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/a", "merge"),
        ("/api/v1/nodes/a/status", "strategic"),
    ]


class SlowStatusApi(FakeApi):
    """Status updates hang until ``release`` is set (an API server busy with thousands of pods)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> dict[str, Any]:
        self.calls.append((path, kind))
        if path.endswith("/status"):
            await self.release.wait()
        return {}


def test_a_slow_status_update_does_not_hold_back_lease_renewals() -> None:
    async def scenario() -> list[tuple[str, str]]:
        api = SlowStatusApi()
        heartbeat = Heartbeat(api=api, lease_interval=10, status_interval=100)
        for name in ("a", "b"):
            heartbeat.add(Beat(name=name, status_body=lambda now: {"status": {}}), now=0.0)
        heartbeat.status_now("a")
        first = heartbeat.send_due(10.0)  # leases a and b, and a's status, which hangs
        await asyncio.gather(*first[:2])
        assert not first[2].done()
        second = heartbeat.send_due(20.0)  # the next renewals go out; no second status for a while one hangs
        await asyncio.gather(*second)
        assert len(second) == 2
        api.release.set()
        await first[2]
        beat_a = heartbeat.get("a")
        assert beat_a is not None
        assert beat_a.sending == set()
        return api.calls

    calls = asyncio.run(scenario())
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
    renewals = [(lease + "a", "merge"), (lease + "b", "merge")]
    assert sorted(calls) == sorted([*renewals, ("/api/v1/nodes/a/status", "strategic"), *renewals])
