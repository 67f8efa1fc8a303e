"""Remediation's GPU reset through the driver upgrade machine, on simulated nodes (issue 21).

The whole operator runs with its operands on two simulated nodes (the driver, the toolkit, the device
plugin, the validator). An XID 48 (a double-bit ECC error, which a GPU reset clears) injected into a GPU
of the first node reaches the operator as the device plugin's ``GpuUnhealthy`` Event. Remediation taints
the node and asks for a driver reload; the upgrade machine cordons the node, restarts its driver pod
although that pod is in sync (a reload resets the GPUs), validates and uncordons it, and remediation
then ends: taint and annotations gone, an Event. The second node's driver pod never changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event, Node, Pod

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.reconcile.operator import OperatorThread
from gpu_operator.remediation import model as r
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.upgrade import model as m
from tests.chaos.harness import OLD, node_states, policy
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, register_operand_agents

JSON = dict[str, Any]


def _driver_uids(client: Client, namespace: str) -> dict[str, str]:
    out = {}
    for pod in client.list(Pod, namespace=namespace, labels={"app.kubernetes.io/component": "nvidia-driver"}):
        doc = pod.to_dict()
        if doc["spec"].get("nodeName") and not doc["metadata"].get("deletionTimestamp"):
            out[doc["spec"]["nodeName"]] = doc["metadata"]["uid"]
    return out


def _remediation(client: Client, name: str) -> tuple[dict[str, str], list[JSON]]:
    node = client.get(Node, name).to_dict()
    annotations = node["metadata"].get("annotations") or {}
    mine = {k: v for k, v in annotations.items() if k.startswith(keys.REMEDIATION_PREFIX)}
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == keys.REMEDIATION_TAINT]
    return mine, taints


def _ended(client: Client, name: str) -> bool:
    annotations, taints = _remediation(client, name)
    return keys.REMEDIATION_STATE not in annotations and not taints


def _events(client: Client, node: str, reason: str) -> list[str]:
    fields: dict[str, Any] = {"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}
    return [str(e.message) for e in client.list(Event, namespace="default", fields=fields)]


@pytest.mark.timeout(600)
def test_an_xid_that_a_reset_clears_reloads_the_nodes_driver_through_the_upgrade_machine(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    register_operand_agents(sim_program)
    install_crds(client=client)
    first, second = sorted(sim_nodes("pcie-l4:2"))
    for name in (first, second):  # a node name reused from an earlier test
        for event in client.list(Event, namespace="default", fields={"involvedObject.name": name}):
            client.delete(Event, str(event.metadata.name), namespace="default")
    body = policy(version=OLD, max_parallel=1)
    body["spec"]["remediation"] = {"enabled": True, "maxNodes": 1, "quietSeconds": 3600,
                                   "rules": [{"xids": [48], "action": "reset"}]}  # fmt: skip
    with OperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace):
        client.create(codecs.from_dict(body))
        try:
            wait_for(lambda: set(node_states(client, [first, second]).values()) == {m.DONE}, timeout=240,
                     describe="both nodes upgrade-done on their first driver")  # fmt: skip
            before = _driver_uids(client, namespace)
            simulator.inject_xid(first, gpu=0, xid=48)
            wait_for(lambda: _remediation(client, first)[0].get(keys.REMEDIATION_STATE) == "reset", timeout=60,
                     describe="the reset remediation under way")  # fmt: skip
            assert _remediation(client, first)[1][0]["value"] == "reset"
            wait_for(lambda: _driver_uids(client, namespace).get(first, before[first]) != before[first], timeout=120,
                     describe="the first node's driver pod restarted (a driver reload)")  # fmt: skip
            wait_for(lambda: _ended(client, first), timeout=180,
                     describe="the remediation ended once the driver was reloaded")  # fmt: skip
            assert node_states(client, [first])[first] == m.DONE
            node = client.get(Node, first)
            assert not (node.spec and node.spec.unschedulable)
            assert keys.UPGRADE_REQUESTED not in (node.metadata.annotations or {})  # type: ignore[union-attr]
            ended = [e for e in _events(client, first, r.EVENT_REASON) if "ended" in e]
            assert ended
            assert "the driver was reloaded" in ended[0]
            assert _driver_uids(client, namespace)[second] == before[second]  # the other node untouched
            assert _remediation(client, second) == ({}, [])
        finally:
            client.delete(ClusterPolicyResource, "cluster-policy")
