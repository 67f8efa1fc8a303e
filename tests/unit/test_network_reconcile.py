"""The network operator's pass on the in-memory API: what it leaves on the cluster.

``reconcile_network_once`` and ``reconcile_networks`` run on lightkube over :class:`FakeApi` (no
control plane, no sockets); each test asserts on the objects and statuses written.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.names import keys
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.networks import reconcile_networks
from gpu_operator.reconcile.network.policy import NetOutcome, reconcile_network_once

NS = "nvidia-network-operator"
JSON = dict[str, Any]
GROUP = net.API_VERSION


def _image(name: str) -> JSON:
    version = "25.04-0.6.1.0-2" if name == "doca-driver" else "v1"  # OFED versions have upstream's pattern
    return {"image": name, "repository": "nvcr.io/nvidia/mellanox", "version": version}


def _node(name: str, *, nic: bool, version: str = "22.04", kernel: str = "5.15.0-105-generic") -> JSON:
    labels = {keys.OS_ID: "ubuntu", keys.OS_VERSION: version, keys.KERNEL: kernel, "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name}  # fmt: skip
    if nic:
        labels[net.NIC_PRESENT] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def _cluster(spec: JSON, *, name: str = net.NCP_NAME) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": GROUP, "kind": net.NCP_KIND, "metadata": {"name": name}, "spec": spec},
            plural="nicclusterpolicies")  # fmt: skip
    api.put(_node("nic-1", nic=True), plural="nodes")
    api.put(_node("nic-2", nic=True, version="24.04", kernel="6.8.0-40-generic"), plural="nodes")
    api.put(_node("cpu-1", nic=False), plural="nodes")
    return api


def _run(api: FakeApi) -> NetOutcome:
    async def run() -> NetOutcome:
        client = api.client()
        try:
            kube = Kube(client, field_manager=net.FIELD_MANAGER)
            outcome = await reconcile_network_once(kube, namespace=NS)
            await reconcile_networks(kube)
            return outcome
        finally:
            await client.close()

    return asyncio.run(run())


def _daemonsets(api: FakeApi) -> dict[str, JSON]:
    return {k[3]: v for k, v in api.objects.items() if k[:3] == ("apps/v1", "daemonsets", NS)}


def _labels(api: FakeApi, node: str) -> dict[str, str]:
    return dict((api.get("v1", "nodes", node) or {})["metadata"].get("labels") or {})


def _status(api: FakeApi, plural: str, name: str) -> JSON:
    return dict((api.get(GROUP, plural, name) or {}).get("status") or {})


SPEC = {
    "ofedDriver": _image("doca-driver"),
    "rdmaSharedDevicePlugin": {
        **_image("k8s-rdma-shared-dev-plugin"),
        "config": json.dumps({"configList": [{"resourceName": "rdma_a", "selectors": {"vendors": ["15b3"]}}]}),
    },
}


def test_a_pass_renders_one_ofed_daemonset_per_pool_and_gates_the_plugin() -> None:
    api = _cluster(SPEC)
    outcome = _run(api)
    ofed = [n for n, d in _daemonsets(api).items() if d["metadata"]["labels"][net.STATE_LABEL] == net.STATE_OFED]
    assert len(ofed) == 2
    assert all(n.startswith(net.OFED_DS_PREFIX) for n in ofed)
    rdma = [d for d in _daemonsets(api).values() if d["metadata"]["labels"][net.STATE_LABEL] == net.STATE_RDMA_DP]
    selector = rdma[0]["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[net.MOFED_WAIT] == "false"
    assert selector[net.NIC_PRESENT] == "true"
    for ds in _daemonsets(api).values():
        assert ds["metadata"]["ownerReferences"][0]["name"] == net.NCP_NAME
        assert net.REVISION_ANNOTATION in ds["metadata"]["annotations"]
    # No OFED pod is Ready yet: NIC nodes wait, the CPU node is left alone; nothing runs, so notReady.
    assert _labels(api, "nic-1").get(net.MOFED_WAIT) != "false"
    assert net.MOFED_WAIT not in _labels(api, "cpu-1")
    status = _status(api, "nicclusterpolicies", net.NCP_NAME)
    assert status["state"] == net.NOT_READY
    assert outcome.state == net.NOT_READY
    assert outcome.requeue_after == 5.0
    names = [s["name"] for s in status["appliedStates"]]
    assert names == list(net.STATES)


def test_an_unchanged_cluster_is_not_written_again() -> None:
    api = _cluster(SPEC)
    _run(api)
    before = {k: v["metadata"]["resourceVersion"] for k, v in api.objects.items()}
    outcome = _run(api)
    after = {k: v["metadata"]["resourceVersion"] for k, v in api.objects.items()}
    assert after == before
    assert outcome.applied == 0


def test_removing_a_section_prunes_its_objects() -> None:
    api = _cluster(SPEC)
    _run(api)
    assert any(d["metadata"]["labels"][net.STATE_LABEL] == net.STATE_RDMA_DP for d in _daemonsets(api).values())
    policy = api.get(GROUP, "nicclusterpolicies", net.NCP_NAME) or {}
    api.put({**policy, "spec": {"ofedDriver": SPEC["ofedDriver"]}}, plural="nicclusterpolicies")
    outcome = _run(api)
    assert outcome.pruned >= 2  # the DaemonSet and its ConfigMap
    left = [k for k, v in api.objects.items()
            if ((v.get("metadata") or {}).get("labels") or {}).get(net.STATE_LABEL) == net.STATE_RDMA_DP]  # fmt: skip
    assert not left, left
    _run(api)
    states = {s["name"]: s["state"] for s in _status(api, "nicclusterpolicies", net.NCP_NAME)["appliedStates"]}
    assert states[net.STATE_RDMA_DP] == net.IGNORE


def test_a_policy_with_another_name_is_ignored_and_deploys_nothing() -> None:
    api = _cluster(SPEC, name="my-policy")
    outcome = _run(api)
    status = _status(api, "nicclusterpolicies", "my-policy")
    assert status["state"] == net.IGNORE
    assert net.NCP_NAME in status["reason"]
    assert not _daemonsets(api)
    assert outcome.policy is None


def test_an_invalid_policy_is_reported_with_its_field() -> None:
    bad = {"ofedDriver": {**_image("doca-driver"), "upgradePolicy": {"maxParallelUpgrades": -1},
                          "env": [{"name": "1BAD", "value": "x"}]}}  # fmt: skip
    api = _cluster(bad)
    _run(api)
    status = _status(api, "nicclusterpolicies", net.NCP_NAME)
    assert status["state"] == net.ERROR
    # The paths the user wrote (as `validate` prints them), not pydantic's locations (env.0.name).
    assert "spec.ofedDriver.upgradePolicy.maxParallelUpgrades: must be greater than" in status["reason"]
    assert "spec.ofedDriver.env[0].name: '1BAD' must be an environment variable name" in status["reason"]
    assert not _daemonsets(api)


def test_mofed_wait_follows_the_ofed_container() -> None:
    api = _cluster(SPEC)
    _run(api)
    ofed = next(n for n, d in _daemonsets(api).items() if d["metadata"]["labels"][net.STATE_LABEL] == net.STATE_OFED
                and d["spec"]["template"]["spec"]["nodeSelector"].get(keys.OS_VERSION) == "22.04")  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mofed-x", "namespace": NS,
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ofed, "uid": "u"}]},
           "spec": {"nodeName": "nic-1", "containers": [{"name": net.OFED_CONTAINER, "image": "x"}]},
           "status": {"containerStatuses": [{"name": net.OFED_CONTAINER, "ready": False, "restartCount": 0,
                                              "image": "x", "imageID": ""}]}}  # fmt: skip
    api.put(pod, plural="pods")
    _run(api)
    assert _labels(api, "nic-1").get(net.MOFED_WAIT) != "false"
    pod["status"] = {"containerStatuses": [{"name": net.OFED_CONTAINER, "ready": True, "restartCount": 0,
                                            "image": "x", "imageID": ""}]}  # fmt: skip
    api.put(pod, plural="pods")
    _run(api)
    assert _labels(api, "nic-1")[net.MOFED_WAIT] == "false"
    assert net.MOFED_WAIT not in _labels(api, "cpu-1")


def test_overlapping_node_policies_the_newer_is_rejected_naming_the_nodes() -> None:
    api = _cluster({"ofedDriver": _image("doca-driver")})
    rdma = SPEC["rdmaSharedDevicePlugin"]
    api.put({"apiVersion": GROUP, "kind": net.NNP_KIND,
             "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
             "spec": {"nodeSelector": {keys.OS_VERSION: "22.04"}, "rdmaSharedDevicePlugin": rdma}},
            plural="nicnodepolicies")  # fmt: skip
    api.put({"apiVersion": GROUP, "kind": net.NNP_KIND,
             "metadata": {"name": "b", "creationTimestamp": "2026-01-02T00:00:00Z"},
             "spec": {"nodeSelector": {net.NIC_PRESENT: "true"}, "rdmaSharedDevicePlugin": rdma}},
            plural="nicnodepolicies")  # fmt: skip
    outcome = _run(api)
    rejected = _status(api, "nicnodepolicies", "b")
    assert rejected["state"] == net.ERROR
    assert "nic-1" in rejected["reason"]
    assert "a" in rejected["reason"]
    assert outcome.node_policies["a"] in (net.NOT_READY, net.READY)
    owners = {d["metadata"]["labels"].get(net.DS_OWNER_LABEL) for d in _daemonsets(api).values()}
    assert "a" in owners
    assert "b" not in owners


def test_a_macvlan_network_becomes_a_nad_owned_by_it() -> None:
    api = _cluster({})
    api.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
             "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
             "spec": {"group": "k8s.cni.cncf.io", "names": {"kind": "NetworkAttachmentDefinition",
                                                            "plural": "network-attachment-definitions"},
                      "scope": "Namespaced", "versions": []}},
            plural="customresourcedefinitions")  # fmt: skip
    api.put({"apiVersion": GROUP, "kind": net.MACVLAN_KIND, "metadata": {"name": "mv", "uid": "mv-uid"},
             "spec": {"networkNamespace": "default", "master": "eth0", "mode": "bridge", "mtu": 1500,
                      "ipam": '{"type":"host-local","subnet":"192.0.2.0/24"}'}},
            plural="macvlannetworks")  # fmt: skip
    _run(api)
    nad = api.get(net.NAD_API_VERSION, "network-attachment-definitions", "mv", namespace="default")
    assert nad is not None
    assert nad["metadata"]["ownerReferences"][0]["kind"] == net.MACVLAN_KIND
    config = json.loads(nad["spec"]["config"])
    assert "macvlan" in json.dumps(config)
    assert "eth0" in json.dumps(config)
    status = _status(api, "macvlannetworks", "mv")
    assert status["state"] == net.READY
    assert (
        status["macvlanNetworkAttachmentDef"] == "k8s.cni.cncf.io/v1/namespaces/default/NetworkAttachmentDefinition/mv"
    )


def test_a_section_no_state_deploys_is_named_in_a_condition_and_an_event() -> None:
    api = _cluster({**SPEC, "spectrumXOperator": _image("spectrum-x-operator")})
    _run(api)
    conditions = _status(api, "nicclusterpolicies", net.NCP_NAME)["conditions"]
    named = [c for c in conditions if c["type"] == "SectionsNotDeployed"]
    assert len(named) == 1
    assert "spectrumXOperator" in named[0]["message"]
    events = [v for k, v in api.objects.items() if k[1] == "events" and v.get("reason") == "SectionsNotDeployed"]
    assert len(events) == 1
    _run(api)  # a second pass neither repeats the Event nor changes the condition
    events = [v for k, v in api.objects.items() if k[1] == "events" and v.get("reason") == "SectionsNotDeployed"]
    assert len(events) == 1


def test_safe_load_not_acted_on_is_said_not_silently_ignored() -> None:
    ofed = {**_image("doca-driver"), "upgradePolicy": {"autoUpgrade": True, "safeLoad": True}}
    api = _cluster({"ofedDriver": ofed})
    _run(api)
    conditions = _status(api, "nicclusterpolicies", net.NCP_NAME)["conditions"]
    named = [c for c in conditions if c["type"] == "SectionsNotDeployed"]
    assert len(named) == 1
    assert "safeLoad" in named[0]["message"]
