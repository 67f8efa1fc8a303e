"""remediation_pass on the in-memory API: what a pass leaves on the cluster (Nodes, pods, Events, metrics).

No control plane, no sockets: ``Kube`` runs on lightkube over :class:`FakeApi`. The signals are Events
in the form the device plugin records them (``healthreport.event_for``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gpu_operator.agents.deviceplugin.health import Transition
from gpu_operator.agents.deviceplugin.healthreport import event_for
from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.kube.objects import event_body
from gpu_operator.names import keys
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.remediation import model as m
from gpu_operator.remediation.controller import RemediationMetrics, RemediationOutcome, remediation_pass
from gpu_operator.render.rbac import OPERATOR_CLUSTER_RULES, Rule, covers

JSON = dict[str, Any]
NOW = time.time()  # Events carry the API server's time; read once, never slept on
_INFO = ("architecture", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion", "kubeletVersion",
         "machineID", "operatingSystem", "osImage", "systemUUID")  # fmt: skip


def _node_info(boot_id: str) -> JSON:
    return {"nodeInfo": {**dict.fromkeys(_INFO, "x"), "bootID": boot_id}}


def _cluster(remediation: JSON, *, nodes: int = 1) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": {"remediation": remediation}}, plural="clusterpolicies")  # fmt: skip
    for i in range(nodes):
        api.put({"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"gpu-{i}", "labels": {keys.NFD_NVIDIA_PCI: "true"}},
                 "status": _node_info("boot-1")}, plural="nodes")  # fmt: skip
        api.put({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"trainer-{i}", "namespace": "work",
                              "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "t",
                                                  "controller": True, "uid": "u"}]},
                 "spec": {"nodeName": f"gpu-{i}",
                          "containers": [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}}]},
                 "status": {"phase": "Running"}}, plural="pods")  # fmt: skip
    return api


def _storm(api: FakeApi, node: str, xid: int, *, count: int = 20) -> None:
    """Events as the device plugin records them, one per GPU transition."""
    for gpu in range(count):
        transition = Transition(uuid=f"GPU-{gpu}", healthy=False, cause="xid", xid=xid)
        reason, message, warning = event_for(transition)
        body = event_body(involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
                          reason=reason, message=message, warning=warning, component="gpu-operator-agent",
                          namespace="default")  # fmt: skip
        api.put(body | {"metadata": {**body["metadata"], "name": f"{node}.{xid}.{gpu}"}}, plural="events")


def _pass(api: FakeApi, metrics: RemediationMetrics, *, now: float = NOW) -> RemediationOutcome:
    async def run() -> RemediationOutcome:
        client = api.client()
        try:
            return await remediation_pass(Kube(client), now=now, metrics=metrics)
        finally:
            await client.close()

    return asyncio.run(run())


def _node(api: FakeApi, name: str) -> JSON:
    node = api.get("v1", "nodes", name)
    assert node is not None
    return node


def _status(api: FakeApi) -> JSON | None:
    policy = api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy")
    assert policy is not None
    return (policy.get("status") or {}).get("remediation")


def _events(api: FakeApi, reason: str) -> list[JSON]:
    return [o for k, o in api.objects.items() if k[1] == "events" and o.get("reason") == reason]


def test_an_xid_storm_taints_the_node_evicts_its_gpu_pod_and_records_one_event_and_metric() -> None:
    api = _cluster({"enabled": True})
    _storm(api, "gpu-0", 79)
    metrics = RemediationMetrics()
    outcome = _pass(api, metrics)
    node = _node(api, "gpu-0")
    annotations = node["metadata"]["annotations"]
    assert annotations[keys.REMEDIATION_STATE] == "reboot"
    assert annotations[keys.REMEDIATION_XID] == "79"
    assert annotations[keys.REMEDIATION_BOOT_ID] == "boot-1"
    assert keys.REMEDIATION_REBOOT_REQUESTED not in annotations  # asked for once the GPU pods are gone
    assert node["spec"]["taints"] == [{"key": keys.REMEDIATION_TAINT, "value": "reboot", "effect": "NoSchedule"}]
    assert api.get("v1", "pods", "trainer-0", "work") is None  # evicted
    assert len(_events(api, m.EVENT_REASON)) == 1
    assert 'gpu_operator_remediation_actions_total{action="reboot",xid="79",dry_run="false"} 1' in metrics.lines()
    assert "gpu_operator_remediation_nodes 1" in metrics.lines()
    assert outcome.plan is not None
    assert outcome.plan.in_remediation == 1
    status = _status(api)
    assert status is not None
    assert status["message"] == "1 of at most 1 node(s) in remediation"
    ((entry),) = status["nodes"]
    assert (entry["name"], entry["action"], entry["xid"], entry["since"]) == (
        "gpu-0", "reboot", 79, annotations[keys.REMEDIATION_SINCE])  # fmt: skip
    _pass(api, metrics)  # the pod is gone: the reboot is asked for
    node = _node(api, "gpu-0")
    assert keys.REMEDIATION_REBOOT_REQUESTED in node["metadata"]["annotations"]
    assert len(_events(api, m.EVENT_REASON)) == 2
    _pass(api, metrics)  # the same storm, a third pass: nothing new
    assert len(_events(api, m.EVENT_REASON)) == 2
    # The node rebooted: the remediation ends.
    api.put({**node, "status": _node_info("boot-2")}, plural="nodes")
    _pass(api, metrics)
    after = _node(api, "gpu-0")
    assert not after["spec"]["taints"]
    assert set(after["metadata"].get("annotations") or {}) == {keys.REMEDIATION_HANDLED}
    assert "gpu_operator_remediation_nodes 0" in metrics.lines()
    assert _status(api) == {"enabled": True, "dryRun": False, "maxNodes": 1, "nodes": [], "held": [],
                            "message": "0 of at most 1 node(s) in remediation"}  # fmt: skip


def test_a_taint_conflict_loses_neither_the_event_nor_the_metric_and_the_next_pass_repairs_it() -> None:
    api = _cluster({"enabled": True})
    _storm(api, "gpu-0", 999, count=2)
    # Another writer changed the taints between the read and the patch: the API server's 422.
    api.fail(method="PATCH", path="/api/v1/nodes/gpu-0", body='"op": ?"test"', status=422)
    metrics = RemediationMetrics()
    _pass(api, metrics)
    node = _node(api, "gpu-0")
    assert node["metadata"]["annotations"][keys.REMEDIATION_STATE] == "taint"
    assert not (node.get("spec") or {}).get("taints")
    assert len(_events(api, m.EVENT_REASON)) == 1
    assert 'gpu_operator_remediation_actions_total{action="taint",xid="999",dry_run="false"} 1' in metrics.lines()
    _pass(api, metrics)  # the taint is repaired; no second Event, no second count
    assert _node(api, "gpu-0")["spec"]["taints"] == [
        {"key": keys.REMEDIATION_TAINT, "value": "taint", "effect": "NoSchedule"}
    ]
    assert len(_events(api, m.EVENT_REASON)) == 1
    assert 'gpu_operator_remediation_actions_total{action="taint",xid="999",dry_run="false"} 1' in metrics.lines()


def test_a_storm_over_many_nodes_reads_the_pods_of_those_the_breaker_may_let_in_only() -> None:
    api = _cluster({"enabled": True, "maxNodes": 1}, nodes=6)
    for i in range(6):
        _storm(api, f"gpu-{i}", 79, count=2)
    _storm(api, "gpu-0", 31, count=1)  # an application error leads to no action: it takes no place
    metrics = RemediationMetrics()
    _pass(api, metrics)
    pod_lists = [r for r in api.requests if r == ("GET", "/api/v1/pods")]
    assert len(pod_lists) == 1  # gpu-0, the one the breaker lets in
    assert api.get("v1", "pods", "trainer-0", "work") is None  # and its GPU pod was drained
    before = len(api.requests)
    _pass(api, metrics)
    assert len([r for r in api.requests[before:] if r == ("GET", "/api/v1/pods")]) == 2  # gpu-0, and gpu-1 next
    for i in range(1, 6):
        assert api.get("v1", "pods", f"trainer-{i}", "work") is not None


def test_the_breaker_stops_a_cascade_and_dry_run_touches_no_node() -> None:
    api = _cluster({"enabled": True, "maxNodes": 1}, nodes=3)
    for i in range(3):
        _storm(api, f"gpu-{i}", 999, count=5)
    metrics = RemediationMetrics()
    _pass(api, metrics)
    states = [(_node(api, f"gpu-{i}")["metadata"].get("annotations") or {}).get(keys.REMEDIATION_STATE)
              for i in range(3)]  # fmt: skip
    assert states == ["taint", None, None]
    assert sorted(e["involvedObject"]["name"] for e in _events(api, m.BREAKER_REASON)) == ["gpu-1", "gpu-2"]
    assert 'gpu_operator_remediation_breaker_open_total{action="taint"} 2' in metrics.lines()
    status = _status(api)
    assert status is not None
    assert [n["name"] for n in status["nodes"]] == ["gpu-0"]
    assert status["held"] == ["gpu-1", "gpu-2"]
    assert status["message"] == (
        "1 of at most 1 node(s) in remediation; circuit breaker open: 2 node(s) with a new XID held back"
    )
    requests = len(api.requests)
    _pass(api, metrics)  # nothing changed: the breaker still holds them, and the status is not written again
    assert _status(api) == status
    assert not [r for r in api.requests[requests:] if r[0] == "PATCH" and r[1].endswith("/status")]

    dry = _cluster({"enabled": True, "dryRun": True}, nodes=2)
    _storm(dry, "gpu-0", 79)
    before = {k: v for k, v in dry.objects.items() if k[1] in ("nodes", "pods")}
    _pass(dry, metrics)
    _pass(dry, metrics)
    assert {k: v for k, v in dry.objects.items() if k[1] in ("nodes", "pods")} == before
    (event,) = _events(dry, m.DRY_RUN_REASON)
    assert event["message"] == "dry run: would reboot node gpu-0 for XID 79"
    assert 'gpu_operator_remediation_actions_total{action="reboot",xid="79",dry_run="true"} 1' in metrics.lines()


def test_turning_remediation_off_ends_every_remediation_then_removes_its_status() -> None:
    api = _cluster({"enabled": True})
    _storm(api, "gpu-0", 999, count=2)
    _pass(api, RemediationMetrics())
    assert [n["action"] for n in (_status(api) or {})["nodes"]] == ["taint"]
    policy = api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy")
    assert policy is not None
    api.put({**policy, "spec": {"remediation": {"enabled": False}}}, plural="clusterpolicies")
    _pass(api, RemediationMetrics())  # the node is released
    assert not _node(api, "gpu-0")["spec"]["taints"]
    status = _status(api)
    assert status is not None
    assert (status["enabled"], status["nodes"]) == (False, [])
    assert status["message"].endswith("remediation is disabled")
    _pass(api, RemediationMetrics())  # off and nothing left: the field goes
    assert _status(api) is None


def test_remediation_off_reads_no_events_and_changes_nothing() -> None:
    api = _cluster({})
    _storm(api, "gpu-0", 79)
    before = dict(api.objects)
    outcome = _pass(api, RemediationMetrics())
    assert outcome.plan is None
    assert api.objects == before


@pytest.mark.parametrize(
    ("remediation", "field"),
    [({"rules": [{"xids": [79], "action": "explode"}]}, "remediation.rules.0.action"),
     ({"maxNodes": "150%"}, "remediation.maxNodes"), ({"quietSeconds": 0}, "remediation.quietSeconds"),
     ({"rules": [{"xids": [], "action": "taint"}]}, "remediation.rules.0.xids")],
)  # fmt: skip
def test_invalid_settings_are_refused_naming_the_field(remediation: JSON, field: str) -> None:
    api = _cluster({"enabled": True, **remediation})
    _storm(api, "gpu-0", 79)
    outcome = _pass(api, RemediationMetrics())
    assert field in outcome.error
    assert not (_node(api, "gpu-0").get("spec") or {}).get("taints")


def test_the_operator_may_read_the_node_events_it_remediates_on() -> None:
    assert covers(OPERATOR_CLUSTER_RULES, Rule(("",), ("events",), ("get", "list", "watch")))


def test_the_device_plugins_events_and_node_changes_wake_remediation_other_events_do_not() -> None:
    woken: list[str] = []
    informers = operator_informers(None, namespace="gpu-operator", wake_all=lambda: woken.append("all"),
                                   wake_reconciler=lambda: woken.append("reconciler"),
                                   wake_upgrade=lambda: woken.append("up"),
                                   wake_remediation=lambda: woken.append("remediation"))  # fmt: skip
    (events,) = [i for i in informers if i.kind == "Event"]
    assert (events.namespace, events.fields) == ("default", "involvedObject.kind=Node")
    unhealthy = event_body(involved={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0"}},
                           reason="GpuUnhealthy", message="GPU-1 unhealthy after XID 79", component="dp",
                           namespace="default")  # fmt: skip
    events.apply("ADDED", unhealthy | {"metadata": {"name": "e1", "namespace": "default"}})
    events.apply("ADDED", unhealthy | {"metadata": {"name": "e2", "namespace": "default"}, "reason": "NodeReady"})
    assert woken == ["remediation"]
    cached = events.items[("default", "e1")]
    assert cached["message"] == "GPU-1 unhealthy after XID 79"  # what the controller reads is kept
    (nodes,) = [i for i in informers if i.kind == "Node"]
    nodes.apply("ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-0"}})
    assert "remediation" in woken[1:]
