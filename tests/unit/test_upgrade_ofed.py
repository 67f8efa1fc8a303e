"""OFED driver upgrades (driver "ofed") through the one upgrade state machine, on the in-memory API.

Five NIC nodes run an out-of-date OFED pod under a NicClusterPolicy with ``maxParallelUpgrades: 2``
and drain on. Repeated ``upgrade_pass(driver="ofed")`` walks every node to ``upgrade-done`` while a
small stand-in for the DaemonSet controller replaces each deleted OFED pod by one of the new revision.
Also: the preview (``upgrade plan --driver ofed``) of the same cluster.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console

from gpu_operator.cli.upgrade import print_preview, to_json
from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.names import keys, network
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.controller import upgrade_pass
from gpu_operator.upgrade.ofed_proposal import build_ofed_proposal
from gpu_operator.upgrade.preview import preview

NS = "nvidia-network-operator"
OFED = keys.upgrade_keys("ofed")
DS = "mofed-ubuntu22.04-0a1b2c3d-ds"
OLD, NEW = "24.10-0.7.0.0-0", "25.04-0.6.1.0-2"
NODES = [f"nic-{i}" for i in range(1, 6)]
OPERATOR_POD = "network-operator-5d8f7"
START = 1_000_000.0
#: The OFED pod template's labels (the renderer's): pods and ControllerRevisions carry them.
TEMPLATE_LABELS = {"app": "mofed-ubuntu22.04", network.STATE_LABEL: network.STATE_OFED}
JSON = dict[str, Any]


def _ds_owner(api: FakeApi) -> JSON:
    ds = api.get("apps/v1", "daemonsets", DS, NS)
    assert ds is not None
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DS, "uid": ds["metadata"]["uid"], "controller": True}


def _ofed_pod(api: FakeApi, node: str, *, revision: str, version: str, ready: bool) -> None:
    image = f"nvcr.io/nvidia/mellanox/doca-driver:{version}-ubuntu22.04-amd64"
    api.put({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"mofed-{node}-{revision}", "namespace": NS, "ownerReferences": [_ds_owner(api)],
                          "labels": {**TEMPLATE_LABELS, "controller-revision-hash": revision}},
             "spec": {"nodeName": node, "containers": [{"name": network.OFED_CONTAINER, "image": image}]},
             "status": {"phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}},
            plural="pods")  # fmt: skip


def _workload(api: FakeApi, name: str, node: str, *, namespace: str = "work", labels: JSON | None = None) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs", "uid": f"rs-{name}",
             "controller": True}  # fmt: skip
    api.put({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner], "labels": labels or {}},
             "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
             "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            plural="pods")  # fmt: skip


def _cluster(*, upgrade_policy: JSON) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": network.API_VERSION, "kind": network.NCP_KIND, "metadata": {"name": network.NCP_NAME},
             "spec": {"ofedDriver": {"repository": "nvcr.io/nvidia/mellanox", "image": "doca-driver",
                                     "version": NEW, "upgradePolicy": upgrade_policy}}},
            plural="nicclusterpolicies")  # fmt: skip
    for name in NODES:
        labels = {network.NIC_PRESENT: "true"}
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                 "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                plural="nodes")  # fmt: skip
    api.put({"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": DS, "namespace": NS, "labels": {network.STATE_LABEL: network.STATE_OFED}},
             "spec": {"selector": {"matchLabels": {"app": "mofed-ubuntu22.04"}}, "updateStrategy": {"type": "OnDelete"},
                      "template": {"metadata": {"labels": {"app": "mofed-ubuntu22.04"}},
                                   "spec": {"containers": [{"name": network.OFED_CONTAINER}]}}}},
            plural="daemonsets")  # fmt: skip
    api.put({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": 2, "data": {},
             "metadata": {"name": f"{DS}-new", "namespace": NS, "ownerReferences": [_ds_owner(api)],
                          "labels": {**TEMPLATE_LABELS, "controller-revision-hash": "new"}}},
            plural="controllerrevisions")  # fmt: skip
    for name in NODES:
        _ofed_pod(api, name, revision="old", version=OLD, ready=True)
        _workload(api, f"app-{name}", name)
    # The Network Operator's own pod: labelled so that no drain ever evicts it.
    _workload(api, OPERATOR_POD, "nic-1", namespace=NS, labels={OFED.drain_skip: "true", "app": "network-operator"})
    return api


def _daemonset_controller(api: FakeApi) -> None:
    """What the OnDelete DaemonSet does: a node whose OFED pod is gone gets one of the new revision,
    Ready one pass later (the driver takes a while to load)."""
    for name in NODES:
        pods = [k for k in api.objects if k[:3] == ("v1", "pods", NS) and k[3].startswith(f"mofed-{name}-")]
        if not pods:
            _ofed_pod(api, name, revision="new", version=NEW, ready=False)
        elif pods == [("v1", "pods", NS, f"mofed-{name}-new")]:
            pod = api.objects[pods[0]]
            pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


def _node(api: FakeApi, name: str) -> JSON:
    node = api.get("v1", "nodes", name)
    assert node is not None
    return node


def _gpu_keys_written(api: FakeApi) -> list[str]:
    found = []
    for name in NODES:
        meta = _node(api, name)["metadata"]
        found += [k for k in [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
                  if k.startswith(keys.UPGRADE_PREFIX)]  # fmt: skip
    return found


def _rollout(api: FakeApi, *, passes: int = 60) -> list[dict[str, str]]:
    """Passes until every node is done; returns each pass's node -> state, and checks the invariants."""
    history: list[dict[str, str]] = []

    async def run() -> None:
        client = api.client()
        try:
            for i in range(passes):
                await upgrade_pass(Kube(client), namespace=NS, now=START + 10 * i, driver="ofed")
                states = {n: (_node(api, n)["metadata"].get("labels") or {}).get(OFED.state, "") for n in NODES}
                history.append(states)
                cordoned = [n for n in NODES if _node(api, n)["spec"].get("unschedulable")]
                assert len(cordoned) <= 2, (i, cordoned, states)  # maxParallelUpgrades
                busy = [n for n, s in states.items() if s in m.CORDONED_STATES]
                assert len(busy) <= 2, (i, states)
                assert not _gpu_keys_written(api)
                if all(s == m.DONE for s in states.values()) and all(
                    api.get("v1", "pods", f"mofed-{n}-new", NS) for n in NODES
                ):
                    return
                _daemonset_controller(api)
        finally:
            await client.close()

    asyncio.run(run())
    return history


POLICY = {"autoUpgrade": True, "maxParallelUpgrades": 2,
          "drain": {"enable": True, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False}}  # fmt: skip


def test_an_ofed_version_bump_walks_every_node_to_done_two_at_a_time() -> None:
    api = _cluster(upgrade_policy=POLICY)
    history = _rollout(api)
    assert all(s == m.DONE for s in history[-1].values()), history[-1]
    for name in NODES:
        assert api.get("v1", "pods", f"mofed-{name}-old", NS) is None  # every old pod replaced
        assert not _node(api, name)["spec"].get("unschedulable")  # and every node uncordoned
        assert api.get("v1", "pods", f"app-{name}", "work") is None  # drained
    # Two at a time: the first two nodes (in name order) start together, the others wait.
    first = next(h for h in history if any(s not in m.IDLE_STATES for s in h.values()))
    assert sorted(n for n, s in first.items() if s not in m.IDLE_STATES) == ["nic-1", "nic-2"]
    events = [o for k, o in api.objects.items() if k[1] == "events"]
    assert events
    assert {e["reason"] for e in events} == {"OFEDDriverUpgrade"}


def test_the_operator_pod_labelled_drain_skip_is_never_evicted() -> None:
    api = _cluster(upgrade_policy=POLICY)
    _rollout(api)
    assert api.get("v1", "pods", OPERATOR_POD, NS) is not None
    assert not [p for method, p in api.requests if method == "POST" and OPERATOR_POD in p]


def test_auto_upgrade_off_leaves_the_ofed_pods_and_nodes_alone() -> None:
    api = _cluster(upgrade_policy={"autoUpgrade": False})
    history = _rollout(api, passes=3)
    assert all(s == "" for s in history[-1].values())
    assert all(api.get("v1", "pods", f"mofed-{n}-old", NS) for n in NODES)


def test_gpu_and_ofed_upgrades_of_one_node_keep_separate_states() -> None:
    api = _cluster(upgrade_policy=POLICY)
    gpu_state = {keys.UPGRADE_STATE: m.POD_RESTART}
    for name in NODES:
        _node(api, name)["metadata"]["labels"].update(gpu_state)

    async def one_pass() -> None:
        client = api.client()
        try:
            await upgrade_pass(Kube(client), namespace=NS, now=START, driver="ofed")
        finally:
            await client.close()

    asyncio.run(one_pass())
    for name in NODES:
        labels = _node(api, name)["metadata"]["labels"]
        assert labels[keys.UPGRADE_STATE] == m.POD_RESTART  # the GPU driver's state, untouched
        assert labels[OFED.state] in (m.REQUIRED, m.DRAIN, m.POD_RESTART)


def test_the_preview_of_an_ofed_rollout_runs_the_same_plan() -> None:
    api = _cluster(upgrade_policy=POLICY)

    async def proposal() -> Any:
        client = api.client()
        try:
            return await build_ofed_proposal(Kube(client), namespace=NS, policy_doc=None)
        finally:
            await client.close()

    found = asyncio.run(proposal())
    assert found.snapshot.keys == OFED
    assert found.knobs.max_parallel == 2
    assert not found.knobs.validation
    assert not found.knobs.pod_deletion
    assert {n.driver.version for n in found.snapshot.nodes if n.driver} == {OLD}
    result = preview(found.snapshot, found.knobs, install_seconds=60)
    assert [w.nodes for w in result.waves] == [("nic-1", "nic-2"), ("nic-3", "nic-4"), ("nic-5",)]
    assert {f.outcome for f in result.nodes} == {m.DONE}
    by_node = {f.node: f for f in result.nodes}
    assert by_node["nic-1"].evict == ["work/app-nic-1"]  # the operator's own pod is not in the drain
    assert result.estimated_seconds == 180
    assert to_json(result, found)["driver"] == "ofed"
    console = Console(record=True, width=200)
    print_preview(console, result, found)
    assert "OFED driver upgrade preview: 5 of 5 node(s) in 3 wave(s)" in console.export_text()
