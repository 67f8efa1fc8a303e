"""reconcile_once, converge and upgrade_pass on the in-memory API: what they leave on the cluster.

Fast (no control plane, no sockets): ``Kube`` runs on lightkube over :class:`FakeApi`, and each test
asserts on the objects the pass wrote, not on the calls it made.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.names import keys
from gpu_operator.reconcile.clusterpolicy import reconcile_once
from gpu_operator.render import OperatorSettings
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.controller import ACTIVE_REQUEUE, UpgradeOutcome, upgrade_pass

NS = "gpu-operator"
OLD, NEW = "570.124.06", "580.65.06"
JSON = dict[str, Any]


def _cluster(spec: JSON | None = None) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": spec or {}}, plural="clusterpolicies")  # fmt: skip
    api.put({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "gpu-1", "labels": {keys.NFD_NVIDIA_PCI: "true", keys.OS_ID: "ubuntu",
                                                      keys.OS_VERSION: "22.04"}},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, plural="nodes")  # fmt: skip
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1", "labels": {}}}, plural="nodes")
    return api


def _reconcile(api: FakeApi) -> Any:
    async def run() -> Any:
        client = api.client()
        try:
            return await reconcile_once(Kube(client), namespace=NS, operator=OperatorSettings())
        finally:
            await client.close()

    return asyncio.run(run())


def _daemonsets(api: FakeApi) -> set[str]:
    return {k[3] for k in api.objects if k[:3] == ("apps/v1", "daemonsets", NS)}


def _labels(api: FakeApi, node: str) -> dict[str, str]:
    return dict((api.get("v1", "nodes", node) or {})["metadata"].get("labels") or {})


def test_a_pass_renders_the_operands_labels_the_gpu_node_and_reports_status() -> None:
    api = _cluster()
    outcome = _reconcile(api)
    operands = {"nvidia-driver-daemonset", "nvidia-device-plugin-daemonset", "nvidia-container-toolkit-daemonset",
                "nvidia-operator-validator", "nvidia-dcgm-exporter", "gpu-feature-discovery"}  # fmt: skip
    assert operands <= _daemonsets(api)
    assert _labels(api, "gpu-1")[keys.GPU_PRESENT] == "true"
    assert _labels(api, "gpu-1")[keys.DEPLOY_PREFIX + "device-plugin"] == "true"
    assert keys.GPU_PRESENT not in _labels(api, "cpu-1") or _labels(api, "cpu-1")[keys.GPU_PRESENT] == "false"
    status = (api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy") or {})["status"]
    assert status["state"] == "notReady"  # nothing runs the pods here: the DaemonSets report none ready
    assert outcome.status is not None
    assert outcome.status.state == "notReady"


def test_an_unchanged_cluster_is_not_written_again() -> None:
    api = _cluster()
    _reconcile(api)
    before = {k: v["metadata"]["resourceVersion"] for k, v in api.objects.items() if k[1] == "daemonsets"}
    _reconcile(api)
    after = {k: v["metadata"]["resourceVersion"] for k, v in api.objects.items() if k[1] == "daemonsets"}
    assert after == before  # converge skipped every object whose applied hash matches


def test_disabling_an_operand_prunes_its_objects() -> None:
    api = _cluster()
    _reconcile(api)
    assert "nvidia-dcgm-exporter" in _daemonsets(api)
    policy = api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy")
    assert policy is not None
    policy["spec"] = {"dcgmExporter": {"enabled": False}}
    _reconcile(api)
    assert "nvidia-dcgm-exporter" not in _daemonsets(api)
    assert "nvidia-device-plugin-daemonset" in _daemonsets(api)  # the others stay


def _driver_cluster(*, pod_revision: str) -> FakeApi:
    """A GPU node whose driver pod runs revision ``pod_revision`` of the driver DaemonSet ("new" is current)."""
    upgrade = {"autoUpgrade": True, "maxParallelUpgrades": 1, "podDeletion": {"timeoutSeconds": 60}}
    api = _cluster(
        {"driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": NEW, "upgradePolicy": upgrade}}
    )
    _reconcile(api)
    # An OS-tagged image: one DaemonSet per OS tag of the GPU nodes.
    (driver_name,) = [n for n in _daemonsets(api) if n.startswith("nvidia-driver-daemonset")]
    driver_set = api.get("apps/v1", "daemonsets", driver_name, NS)
    assert driver_set is not None
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": driver_name,
             "uid": driver_set["metadata"]["uid"], "controller": True}  # fmt: skip
    component = {"app.kubernetes.io/component": "nvidia-driver"}
    api.put({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": 2, "data": {},
             "metadata": {"name": "nvidia-driver-new", "namespace": NS, "ownerReferences": [owner],
                          "labels": {**component, "controller-revision-hash": "new"}}},
            plural="controllerrevisions")  # fmt: skip
    version = NEW if pod_revision == "new" else OLD
    api.put({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"nvidia-driver-{pod_revision}", "namespace": NS, "ownerReferences": [owner],
                          "labels": {**component, "controller-revision-hash": pod_revision}},
             "spec": {"nodeName": "gpu-1", "containers": [{"name": "driver", "image": "driver",
                                                           "env": [{"name": "DRIVER_VERSION", "value": version}]}]},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            plural="pods")  # fmt: skip
    return api


def _upgrade_events(api: FakeApi) -> list[JSON]:
    return [o for k, o in api.objects.items() if k[1] == "events" and o.get("reason") == m.EVENT_REASON]


def test_a_node_first_seen_up_to_date_is_labelled_done_without_an_event() -> None:
    api = _driver_cluster(pod_revision="new")

    async def one_pass() -> None:
        client = api.client()
        try:
            await upgrade_pass(Kube(client), namespace=NS)
        finally:
            await client.close()

    asyncio.run(one_pass())
    assert _labels(api, "gpu-1")[m.STATE_LABEL] == m.DONE
    assert _upgrade_events(api) == []  # nothing happened to the node: no Event per node on a new cluster


def test_an_outdated_driver_pod_is_cordoned_and_replaced_by_upgrade_passes() -> None:
    api = _driver_cluster(pod_revision="old")

    async def passes() -> list[str]:
        client = api.client()
        seen: list[str] = []
        try:
            for _ in range(12):
                await upgrade_pass(Kube(client), namespace=NS)
                seen.append(_labels(api, "gpu-1").get(m.STATE_LABEL, ""))
                if api.get("v1", "pods", "nvidia-driver-old", NS) is None:
                    break
        finally:
            await client.close()
        return seen

    seen = asyncio.run(passes())
    assert api.get("v1", "pods", "nvidia-driver-old", NS) is None, seen  # the outdated driver pod was deleted
    assert seen[0] == m.REQUIRED
    node = api.get("v1", "nodes", "gpu-1") or {}
    assert node["spec"]["unschedulable"] is True  # cordoned before its driver went
    assert _labels(api, "gpu-1")[m.STATE_LABEL] in (m.POD_RESTART, m.VALIDATION)
    events = _upgrade_events(api)
    assert events
    assert all(e["involvedObject"]["name"] == "gpu-1" for e in events)


def _one_pass(api: FakeApi) -> UpgradeOutcome:
    async def run() -> UpgradeOutcome:
        client = api.client()
        try:
            return await upgrade_pass(Kube(client), namespace=NS)
        finally:
            await client.close()

    return asyncio.run(run())


def test_no_node_is_planned_while_the_policy_has_a_spec_not_yet_applied() -> None:
    # A restarted operator finds a node mid-upgrade and a policy changed while it was down: planned
    # before the reconciler applies the change, the old driver pod would count as up to date.
    api = _driver_cluster(pod_revision="old")
    policy = api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy") or {}
    ready = next(c for c in policy["status"]["conditions"] if c["type"] == "Ready")
    api.put({**policy, "metadata": {**policy["metadata"], "generation": ready["observedGeneration"] + 1}},
            plural="clusterpolicies")  # fmt: skip
    outcome = _one_pass(api)
    assert m.STATE_LABEL not in _labels(api, "gpu-1")
    assert "latest spec is not applied" in outcome.partitions[0].held
    assert outcome.requeue_after == ACTIVE_REQUEUE  # looked at again soon, not only on the next change
    _reconcile(api)  # applied: the status says which generation
    assert _one_pass(api).partitions[0].held == ""
    assert _labels(api, "gpu-1")[m.STATE_LABEL] == m.REQUIRED


def test_no_node_is_planned_while_a_driver_daemonset_controller_lags_its_spec() -> None:
    api = _driver_cluster(pod_revision="old")
    (name,) = [n for n in _daemonsets(api) if n.startswith("nvidia-driver-daemonset")]
    driver_set = api.get("apps/v1", "daemonsets", name, NS) or {}
    counts = {"currentNumberScheduled": 1, "desiredNumberScheduled": 1, "numberMisscheduled": 0, "numberReady": 1}
    lagging = {**driver_set, "metadata": {**driver_set["metadata"], "generation": 3},
               "status": {**counts, "observedGeneration": 2}}  # fmt: skip
    api.put(lagging, plural="daemonsets")
    outcome = _one_pass(api)
    assert m.STATE_LABEL not in _labels(api, "gpu-1")
    assert name in outcome.partitions[0].held
    api.put({**lagging, "status": {**counts, "observedGeneration": 3}}, plural="daemonsets")
    _one_pass(api)
    assert _labels(api, "gpu-1")[m.STATE_LABEL] == m.REQUIRED
