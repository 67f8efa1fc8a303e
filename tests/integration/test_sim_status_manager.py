"""The simulated kubelet as a status manager: when the node-lifecycle controller (or anyone) marks a running
pod not Ready, as ``MarkPodsNotReady`` does for a node whose heartbeats lagged, the kubelet writes its own
status back and the pod is Ready again."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpu_operator.localcluster.waiting import wait_for
from tests.integration.conftest_sim import SimNodesFactory

AGENT = ["gpu-operator", "agent"]


def _ready(client: Client, name: str, namespace: str) -> str | None:
    conditions = client.get(Pod, name, namespace=namespace).to_dict().get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def _wait_ready(client: Client, name: str, namespace: str, *, timeout: float, describe: str) -> None:
    wait_for(lambda: _ready(client, name, namespace) == "True", timeout=timeout, describe=describe)


@pytest.mark.timeout(120)
def test_pod_marked_not_ready_returns_to_ready(client: Client, namespace: str, sim_nodes: SimNodesFactory) -> None:
    names = sim_nodes("cpu-only:3")
    for index, node in enumerate(names):
        container = {"name": "app", "image": "gpu-operator:test", "command": [*AGENT, "sleep"]}
        manifest: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{index}", "namespace": namespace},
            "spec": {"nodeName": node, "containers": [container]},
        }
        client.create(codecs.from_dict(manifest))
    for index in range(len(names)):
        _wait_ready(client, f"p{index}", namespace, timeout=30, describe=f"p{index} Ready")
    # What the node-lifecycle controller's MarkPodsNotReady sends: the Ready condition only, merged by type.
    marked = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}}
    for index in range(len(names)):
        client.patch(Pod.Status, f"p{index}", marked, namespace=namespace, patch_type=PatchType.STRATEGIC)
    for index in range(len(names)):
        _wait_ready(client, f"p{index}", namespace, timeout=20, describe=f"p{index} Ready again (written back)")
