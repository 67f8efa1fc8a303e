"""Cluster reads the chart tests share (simulated and real nodes): the operator's pods, the chart's
ClusterPolicy state, whether an object exists."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod

from gpu_operator.kube.api import ClusterPolicyResource

JSON = dict[str, Any]
#: The chart's ClusterPolicy.
POLICY = "cluster-policy"


def operator_pods(client: Client, namespace: str) -> list[JSON]:
    return [p.to_dict() for p in client.list(Pod, namespace=namespace, labels={"app": "gpu-operator"})]


def policy_state(client: Client, name: str = POLICY) -> str | None:
    """``status.state`` of the ClusterPolicy ``name`` (None when it does not exist or has no status)."""
    try:
        obj: JSON = client.get(ClusterPolicyResource, name).to_dict()  # type: ignore[no-untyped-call]
    except ApiError:
        return None
    return (obj.get("status") or {}).get("state")


def exists(client: Client, kind: Any, name: str, namespace: str | None) -> bool:
    try:
        client.get(kind, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return False
        raise
    return True
