"""The cluster API the driver manager and the MIG manager need beyond their Node's labels: :class:`NodeCluster`.

Pods on this node (to find GPU pods and wait for operand pods to go), the Eviction API (which answers
429 while a PodDisruptionBudget forbids the disruption), deletion, the Node's annotations and
``spec.unschedulable`` (cordon), and Events. The agent context provides it as ``ctx.cluster``
(:func:`cluster_of`). Implementations: ``kube.nodecluster.LightkubeCluster`` (lightkube, for real
nodes) and ``kube.nodecluster.RestCluster`` (the simulator's REST client); a test fake will do too. The
pod and node views are ``kube.podview``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.kube.podview import Eviction, NodeInfo, PodInfo, pod_info

__all__ = ["ClusterContext", "Eviction", "NodeCluster", "NodeInfo", "PodInfo", "cluster_of", "pod_info"]


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


@runtime_checkable
class ClusterContext(Protocol):
    """An agent context that gives node agents the cluster API beyond their Node (both real nodes'
    ``HostContext`` and the simulator's contexts do)."""

    @property
    def cluster(self) -> NodeCluster | None: ...


def cluster_of(ctx: AgentContext) -> NodeCluster | None:
    """``ctx.cluster`` when the context provides one."""
    return ctx.cluster if isinstance(ctx, ClusterContext) else None
