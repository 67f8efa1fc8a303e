"""Light remediation on the real control plane with simulated GPU nodes and the operator running (issue 21).

The real device plugin agent runs on three simulated nodes (a DaemonSet, as in
``test_deviceplugin_sim``); XIDs are injected into the simulated GPUs, so the plugin's health thread
records the ``GpuUnhealthy`` Events the operator reads: the same path as on a real node. The operator's
operands are kept off the nodes (``nvidia.com/gpu.deploy.operands=false``): only remediation acts.

1. Dry run: an XID 79 storm on node 0 gives one ``GpuRemediationDryRun`` Event; node 0 keeps no taint,
   no remediation annotation, and its GPU pod.
2. Dry run off: node 0 (its XIDs are within ``quietSeconds``) is remediated once: the reboot taint, its
   GPU pod evicted, then the reboot request; ``GpuRemediation`` Events say both and the action is counted.
3. Cascade: storms on nodes 1 and 2 with ``maxNodes: 1``: neither is tainted or drained; each gets a
   circuit-breaker Warning, counted in the breaker metric; ``status.remediation`` names node 0 in
   remediation and the two held back.
4. Node 0 reboots (a new bootID): its remediation ends, and the breaker admits one held node, not both.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.reconcile.operator import OperatorThread
from gpu_operator.remediation import model as m
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
GPU = keys.GPU_RESOURCE
POLICY = "cluster-policy"


def _objects(namespace: str) -> list[JSON]:
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    plugin = {"name": "device-plugin", "image": "gpu-operator:test", "env": env,
              "command": ["gpu-operator", "agent", "device-plugin"]}  # fmt: skip
    selector = {keys.NFD_NVIDIA_PCI: "true", "gpu-operator.sim/node": "true"}
    pod_spec = {"nodeSelector": selector, "terminationGracePeriodSeconds": 1, "containers": [plugin]}
    template = {"metadata": {"labels": {"app": "remediation-dp"}}, "spec": pod_spec}
    meta = {"name": "remediation-dp", "namespace": namespace}
    spec = {"selector": {"matchLabels": {"app": "remediation-dp"}}, "template": template}
    return [{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "spec": spec}]


def _gpu_pod(*, name: str, namespace: str, node: str) -> JSON:
    container = {"name": "main", "image": "gpu-operator:test", "command": ["gpu-operator", "agent", "sleep"],
                 "resources": {"limits": {GPU: "1"}}}  # fmt: skip
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
            "containers": [container]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _policy(*, dry_run: bool) -> JSON:
    remediation = {"enabled": True, "dryRun": dry_run, "maxNodes": 1, "quietSeconds": 3600}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": POLICY},
            "spec": {"remediation": remediation}}  # fmt: skip


def _events(client: Client, node: str, reason: str) -> list[JSON]:
    fields: dict[str, Any] = {"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}
    return [e.to_dict() for e in client.list(Event, namespace="default", fields=fields)]


def _status(client: Client) -> JSON:
    """``status.remediation`` of the policy as the API server keeps it ({} when absent)."""
    policy = client.get(ClusterPolicyResource, POLICY).to_dict()  # type: ignore[no-untyped-call]
    return dict((policy.get("status") or {}).get("remediation") or {})


def _node(client: Client, name: str) -> JSON:
    return client.get(Node, name).to_dict()


def _remediation(node: JSON) -> tuple[dict[str, str], list[JSON]]:
    """The node's remediation annotations and taints."""
    annotations = node["metadata"].get("annotations") or {}
    mine = {k: v for k, v in annotations.items() if k.startswith(keys.REMEDIATION_PREFIX)}
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] == keys.REMEDIATION_TAINT]
    return mine, taints


def _running(client: Client, name: str, namespace: str) -> bool:
    pods = [p.to_dict() for p in client.list(Pod, namespace=namespace) if p.metadata.name == name]  # type: ignore[union-attr]
    return bool(pods) and (pods[0].get("status") or {}).get("phase") == "Running"


def _metric(thread: OperatorThread, line: str) -> bool:
    operator = thread.operator
    return operator is not None and line in operator.metric_lines()


def _passes_since_now(thread: OperatorThread, client: Client, nodes: list[str]) -> None:
    """Until at least one whole remediation pass has started after this call and ended: what a test that
    proves "still nothing" needs (a sleep only hoped for it). Each round changes a label on ``nodes``, which
    wakes the remediation loop, and waits for one more pass to end; a pass under way in the first round
    may have begun before, so there are two."""
    operator = thread.operator
    assert operator is not None
    for _ in range(2):
        before = operator.remediation_stats.passes
        for name in nodes:
            poke = {"metadata": {"labels": {"test.gpu-operator/poke": str(time.monotonic_ns())}}}
            client.patch(Node, name, poke, patch_type=PatchType.MERGE)
        wait_for(lambda b=before: operator.remediation_stats.passes > b, timeout=30, interval=0.05,  # type: ignore[misc]
                 describe="a remediation pass after the change")  # fmt: skip


def _storm(simulator: Simulator, node: str) -> None:
    """XID 79 on every GPU of the node, three times over."""
    gpus = len(simulator.node(node).gpu.devices())
    for _ in range(3):
        for gpu in range(gpus):
            simulator.inject_xid(node, gpu=gpu, xid=79)


@pytest.mark.timeout(300)
def test_an_xid_storm_remediates_one_node_and_the_breaker_stops_a_cascade(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    install_crds(client=client)
    names = sorted(sim_nodes("pcie-l4:3"))
    for name in names:  # the operator's operands stay off these nodes: only remediation acts on them
        client.patch(Node, name, {"metadata": {"labels": {keys.DEPLOY_OPERANDS: "false"}}}, patch_type=PatchType.MERGE)
        for event in _events(client, name, "GpuUnhealthy"):  # a node name reused from an earlier test
            client.delete(Event, event["metadata"]["name"], namespace="default")
    spec = agent_registry().get("device-plugin")
    assert spec is not None
    sim_program("device-plugin", spec.entrypoint)
    for obj in _objects(namespace):
        client.create(codecs.from_dict(obj))
    for name in names:
        wait_for(lambda n=name: (_node(client, n)["status"].get("allocatable") or {}).get(GPU, "0") != "0",  # type: ignore[misc]
                 timeout=60, describe=f"GPUs allocatable on {name}")  # fmt: skip
    pods = {name: f"trainer-{i}" for i, name in enumerate(names)}
    for name, pod in pods.items():
        client.create(codecs.from_dict(_gpu_pod(name=pod, namespace=namespace, node=name)))
    for pod in pods.values():
        wait_for(lambda p=pod: _running(client, p, namespace), timeout=60, describe=f"{pod} running")  # type: ignore[misc]
    first, *others = names

    with OperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace) as thread:
        client.create(codecs.from_dict(_policy(dry_run=True)))
        try:
            # 1. Dry run: one Event saying what would be done, nothing else.
            _storm(simulator, first)
            wait_for(lambda: _events(client, first, m.DRY_RUN_REASON), timeout=60, describe="the dry-run Event")
            (dry,) = _events(client, first, m.DRY_RUN_REASON)
            assert dry["message"] == f"dry run: would reboot node {first} for XID 79"
            wait_for(lambda: _metric(thread, 'gpu_operator_remediation_actions_total{action="reboot",xid="79",'
                                     'dry_run="true"} 1'), timeout=10, describe="the dry-run metric")  # fmt: skip
            _passes_since_now(thread, client, [first])  # passes that saw the storm again: still nothing
            assert _remediation(_node(client, first)) == ({}, [])
            assert _running(client, pods[first], namespace)
            assert len(_events(client, first, m.DRY_RUN_REASON)) == 1  # the storm is reported once
            wait_for(lambda: _status(client).get("dryRun") is True, timeout=10, describe="status.remediation")
            assert _status(client)["nodes"] == []

            # 2. Dry run off: the storm remediates the node, once.
            client.patch(ClusterPolicyResource, POLICY, {"spec": {"remediation": {"dryRun": False}}},
                         patch_type=PatchType.MERGE)  # fmt: skip
            wait_for(lambda: not _running(client, pods[first], namespace), timeout=60,
                     describe=f"{pods[first]} evicted")  # fmt: skip
            wait_for(lambda: keys.REMEDIATION_REBOOT_REQUESTED in _remediation(_node(client, first))[0], timeout=30,
                     describe="the reboot requested once the GPU pod is gone")  # fmt: skip
            annotations, taints = _remediation(_node(client, first))
            assert annotations[keys.REMEDIATION_STATE] == "reboot"
            assert annotations[keys.REMEDIATION_XID] == "79"
            assert taints == [{"key": keys.REMEDIATION_TAINT, "value": "reboot", "effect": "NoSchedule"}]
            acted, requested = sorted(_events(client, first, m.EVENT_REASON), key=lambda e: "drained" in e["message"])
            assert acted["type"] == "Warning"
            assert "remediation reboot for XID 79" in acted["message"]
            assert "GPU pods drained: reboot requested" in requested["message"]
            assert _metric(thread, 'gpu_operator_remediation_actions_total{action="reboot",xid="79",dry_run="false"} 1')
            assert _metric(thread, "gpu_operator_remediation_nodes 1")

            # 3. A cascade: the breaker holds the other nodes (maxNodes 1), with a Warning each.
            for name in others:
                _storm(simulator, name)
            for name in others:
                wait_for(lambda n=name: _events(client, n, m.BREAKER_REASON), timeout=60,  # type: ignore[misc]
                         describe=f"a breaker Event on {name}")  # fmt: skip
            _passes_since_now(thread, client, others)
            for name in others:
                assert _remediation(_node(client, name)) == ({}, [])
                assert _running(client, pods[name], namespace)
                (held,) = _events(client, name, m.BREAKER_REASON)
                assert held["type"] == "Warning"
                assert held["message"].startswith("circuit breaker open: 1 nodes already in remediation")
                assert _events(client, name, m.EVENT_REASON) == []
            assert _metric(thread, 'gpu_operator_remediation_breaker_open_total{action="reboot"} 2')
            assert len(_events(client, first, m.EVENT_REASON)) == 2  # still one remediation on the first node
            # The policy's status says the same, through the real CRD schema (nothing pruned).
            wait_for(lambda: _status(client).get("held") == others, timeout=10, describe="held nodes in status")
            status = _status(client)
            assert [(n["name"], n["action"], n["xid"]) for n in status["nodes"]] == [(first, "reboot", 79)]
            assert status["nodes"][0]["waiting"] == "waiting for the node to reboot"
            assert status["message"] == ("1 of at most 1 node(s) in remediation; circuit breaker open: "
                                         "2 node(s) with a new XID held back")  # fmt: skip

            # 4. The first node reboots (its kubelet reports a new bootID): its remediation ends, and the
            # breaker lets one held node in (their XIDs are within quietSeconds), never both.
            body = {"status": {"nodeInfo": {"bootID": "rebooted-0"}}}
            client.patch(Node.Status, first, body, patch_type=PatchType.MERGE)
            wait_for(lambda: not _remediation(_node(client, first))[1], timeout=30, describe=f"{first} released")
            mine, _ = _remediation(_node(client, first))
            assert set(mine) == {keys.REMEDIATION_HANDLED}
            assert any("ended: the node rebooted" in e["message"] for e in _events(client, first, m.EVENT_REASON))
            wait_for(lambda: [n["name"] for n in _status(client)["nodes"]] in ([others[0]], [others[1]]),
                     timeout=30, describe="one held node admitted")  # fmt: skip
            _passes_since_now(thread, client, others)  # more passes: still only one node in remediation
            entered = [name for name in others if _remediation(_node(client, name))[0].get(keys.REMEDIATION_STATE)]
            status = _status(client)
            assert len(entered) == 1, entered
            assert [n["name"] for n in status["nodes"]] == entered
            assert status["held"] == [name for name in others if name not in entered]
        finally:
            client.delete(ClusterPolicyResource, POLICY)
