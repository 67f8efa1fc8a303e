"""The cluster API helpers (pod parsing, label pause/restore rules, waiting for pods) and the in-memory
:class:`FakeCluster` the MIG manager and driver manager unit tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_operator.agents.shared.cluster import Eviction, NodeInfo, PodInfo, pod_info
from gpu_operator.agents.shared.operands import (
    DRIVER_PAUSE,
    MIG_PAUSE,
    pause_changes,
    paused,
    restore_changes,
    wait_for_pods_gone,
)
from tests.unit.fake_context import FakeNode


@dataclass
class RecordingNode(FakeNode):
    """FakeNode that remembers every patch, so tests can check the order of state labels."""

    history: list[dict[str, str | None]] = field(default_factory=list)

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        self.history.append(dict(changes))
        await super().patch_labels(changes)

    def values_of(self, key: str) -> list[str | None]:
        return [patch[key] for patch in self.history if key in patch]


@dataclass
class FakeCluster:
    """NodeCluster in memory. Pods listed in ``stuck`` never go; ``pdb_blocked`` pods answer 429 to eviction
    ``pdb_blocks`` times; a pod whose deploy label is paused disappears, as its DaemonSet controller would."""

    node_labels: FakeNode
    pods: list[PodInfo] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    stuck: set[str] = field(default_factory=set)
    pdb_blocked: set[str] = field(default_factory=set)
    pdb_blocks: int = 1_000_000
    evictions: list[str] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    cordons: list[bool] = field(default_factory=list)
    daemonset_apps: dict[str, str] = field(default_factory=dict)  # app label -> deploy label key

    async def node(self) -> NodeInfo:
        return NodeInfo(
            labels=dict(self.node_labels.values), annotations=dict(self.annotations), unschedulable=self.unschedulable
        )

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        if labels:
            await self.node_labels.patch_labels(labels)
        for key, value in (annotations or {}).items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        if unschedulable is not None:
            self.unschedulable = unschedulable
            self.cordons.append(unschedulable)

    def _present(self) -> list[PodInfo]:
        # DaemonSet pods leave once their deploy label no longer says "true" (unless stuck).
        keep = []
        for pod in self.pods:
            key = self.daemonset_apps.get(pod.labels.get("app", ""))
            if key and self.node_labels.values.get(key) != "true" and pod.name not in self.stuck:
                continue
            keep.append(pod)
        self.pods = keep
        return keep

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        pods = self._present()
        if selector:
            key, _, value = selector.partition("=")
            pods = [p for p in pods if p.labels.get(key) == value]
        await asyncio.sleep(0)
        return list(pods)

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        self.evictions.append(name)
        if name in self.pdb_blocked and self.pdb_blocks > 0:
            self.pdb_blocks -= 1
            return Eviction.BLOCKED
        before = len(self.pods)
        self.pods = [p for p in self.pods if p.name != name]
        return Eviction.EVICTED if len(self.pods) < before else Eviction.GONE

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.deletions.append(name)
        self.pods = [p for p in self.pods if p.name != name or p.name in self.stuck]

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message))


class FakeClock:
    """A clock that only moves when the code under test sleeps (unit tests never really sleep)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float | None) -> bool:
        self.sleeps += 1
        self.now += seconds or 0.0
        await asyncio.sleep(0)
        return False


def test_pause_rules_follow_the_label_contract() -> None:
    labels = {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.dcgm": "false",  # the admin's opt-out: never touched
        "nvidia.com/gpu.deploy.dcgm-exporter": "custom",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change",  # already paused
    }
    changes = pause_changes(
        labels, operands=["device-plugin", "dcgm", "dcgm-exporter", "gpu-feature-discovery", "nvsm"], reason=MIG_PAUSE
    )
    assert changes == {
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
        "nvidia.com/gpu.deploy.dcgm-exporter": "custom_paused-for-mig-change",
    }
    after = {**labels, **{k: v for k, v in changes.items() if v is not None}}
    assert paused(after, reason=MIG_PAUSE) == sorted(
        [
            "nvidia.com/gpu.deploy.device-plugin",
            "nvidia.com/gpu.deploy.dcgm-exporter",
            "nvidia.com/gpu.deploy.gpu-feature-discovery",
        ]
    )
    assert restore_changes(after, reason=MIG_PAUSE) == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "custom",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    }
    assert restore_changes(after, reason=DRIVER_PAUSE) == {}  # the other reason's pauses are not ours


def test_pod_info_recognises_gpu_pods() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "n", "ownerReferences": [{"kind": "ReplicaSet", "controller": True}]},
        "spec": {
            "containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}],
            "volumes": [{"emptyDir": {}}],
        },
        "status": {"phase": "Running"},
    }
    info = pod_info(pod)
    assert (info.gpu, info.owner_kind, info.empty_dir, info.terminating) == (True, "ReplicaSet", True, False)
    assert pod_info({"metadata": {"name": "q"}, "spec": {"containers": [{}]}}).gpu is False


def test_wait_for_pods_gone_times_out_with_the_names() -> None:
    node = FakeNode()
    cluster = FakeCluster(node_labels=node, pods=[PodInfo(namespace="gpu-operator", name="dp-1", labels={"app": "a"})])
    clock = FakeClock()
    left = asyncio.run(wait_for_pods_gone(cluster, apps=["a"], timeout=10, sleep=clock.sleep, interval=1, clock=clock))
    assert left == ["gpu-operator/dp-1"]
    assert clock.now == 10
