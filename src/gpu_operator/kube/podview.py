"""The pod and node views the node agents decide on: what a pod is (GPU pod, DaemonSet pod, terminating,
with emptyDir data) and what a Node says (labels, annotations, cordon), from the API's JSON.

Pure and shared: ``kube.nodecluster``'s clients return these, the driver and MIG managers decide on
them, and tests build them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpu_operator.kube.objects import Eviction
from gpu_operator.names import keys
from gpu_operator.names.pods import PodView, pod_view

__all__ = ["GPU_RESOURCE_PREFIXES", "Eviction", "NodeInfo", "PodInfo", "pod_info"]

GPU_RESOURCE_PREFIXES = keys.GPU_RESOURCE_PREFIXES
#: The pod view of the agents is the one of the upgrade controller (``names.pods``).
PodInfo = PodView
pod_info = pod_view


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
