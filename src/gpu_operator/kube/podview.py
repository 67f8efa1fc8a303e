"""The pod and node views the node agents decide on: what a pod is (GPU pod, DaemonSet pod, terminating,
with emptyDir data) and what a Node says (labels, annotations, cordon), from the API's JSON.

Pure and shared: ``kube.nodecluster``'s clients return these, the driver and MIG managers decide on
them, and tests build them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.kube.objects import Eviction

__all__ = ["GPU_RESOURCE_PREFIXES", "Eviction", "NodeInfo", "PodInfo", "pod_info"]

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


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
