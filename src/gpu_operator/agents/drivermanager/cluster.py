"""The cluster API the driver manager and the MIG manager need beyond their Node's labels: :class:`NodeCluster`.

Pods on this node (to find GPU pods and wait for operand pods to go), the Eviction API (which answers
429 while a PodDisruptionBudget forbids the disruption), deletion, the Node's annotations and
``spec.unschedulable`` (cordon), and Events. The agent context provides it as ``ctx.cluster``
(:func:`cluster_of`). Implementations: ``kubeclients.LightkubeCluster`` (lightkube, for real nodes) and
``kubeclients.RestCluster`` (any JSON REST client such as the simulator's); a test fake will do too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from gpu_operator.agents.runtime import AgentContext

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


class Eviction(Enum):
    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget does not allow it now
    GONE = "gone"


@dataclass(frozen=True, kw_only=True)
class PodInfo:
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Running"
    owner_kind: str = ""  # kind of the controller owning the pod ("DaemonSet", "ReplicaSet", ...)
    gpu: bool = False  # a container requests or limits nvidia.com/gpu* or nvidia.com/mig-*
    deleting: bool = False
    empty_dir: bool = False


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool


class NodeCluster(Protocol):
    """This node's view of the cluster API."""

    async def node(self) -> NodeInfo: ...

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        """Merge-patch the Node: None values remove a label or annotation."""
        ...

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        """Pods bound to this node, optionally filtered by a label selector."""
        ...

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        """Ask the Eviction API to evict a pod (PodDisruptionBudgets apply)."""
        ...

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None: ...

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        """Record a Kubernetes Event about the Node (best effort)."""
        ...


def cluster_of(ctx: AgentContext) -> NodeCluster | None:
    """``ctx.cluster`` when the context provides one (real nodes and simulated nodes do)."""
    found: NodeCluster | None = getattr(ctx, "cluster", None)
    return found


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """A PodInfo from a pod's JSON (as the API returns it)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    gpu = False
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        names = [*(resources.get("limits") or {}), *(resources.get("requests") or {})]
        gpu = gpu or any(n.startswith(GPU_RESOURCE_PREFIXES) for n in names)
    return PodInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        phase=(pod.get("status") or {}).get("phase", ""),
        owner_kind=owners[0].get("kind", "") if owners else "",
        gpu=gpu,
        deleting=bool(meta.get("deletionTimestamp")),
        empty_dir=any("emptyDir" in v for v in spec.get("volumes") or []),
    )
