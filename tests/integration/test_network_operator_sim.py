"""The Network Operator on the real control plane with simulated NIC nodes (``sim.nics``).

The operator runs in a thread of the test process against the session's API server; the NIC nodes
are simulated kubelets whose stand-ins behave as the real containers' contracts do: the OFED
container writes ``/run/mellanox/drivers/.driver-ready`` after loading and the RDMA and SR-IOV
device plugins exit when it is missing. So a plugin that started before OFED would crash-loop, and
the tests see it in its restart count, not only in the nodeSelector.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.cli.main import cli
from gpu_operator.kube.api import NicClusterPolicyResource, NicNodePolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.operator import NetworkOperatorThread
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.shapes import nic_node_requests
from tests.integration.conftest_sim import SimNodesFactory, explain_pods

JSON = dict[str, Any]
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
OFED_STATE_LABEL = f"nvidia.com/{net.OFED_DRIVER_NAME}-driver-upgrade-state"
OFED_DRAIN_SKIP = f"nvidia.com/{net.OFED_DRIVER_NAME}-driver-upgrade-drain.skip"
NEW_OFED = "25.07-0.9.7.0-0"
IN_PROGRESS = {"cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
               "pod-restart-required", "validation-required", "uncordon-required"}  # fmt: skip


def network_crds() -> dict[str, JSON]:
    """The network operator's CRDs as the chart ships them (deploy/crds, generated)."""
    out = {}
    for path in sorted([*CRDS.glob("mellanox.com_*.yaml"), *CRDS.glob("k8s.cni.cncf.io_*.yaml")]):
        body = yaml.safe_load(path.read_text())
        out[body["metadata"]["name"]] = body
    assert len(out) == 6, sorted(out)
    return out


@pytest.fixture
def network_operator(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[NetworkOperatorThread]:
    install_crds(client=client, manifests=network_crds())
    with NetworkOperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace) as op:
        yield op
    for resource in (NicClusterPolicyResource, NicNodePolicyResource):
        for obj in client.list(resource):
            client.delete(resource, str(obj.metadata.name))  # type: ignore[union-attr]


def _image(name: str, version: str) -> JSON:
    return {"image": name, "repository": "nvcr.io/nvidia/mellanox", "version": version}


def _policy(*, name: str = net.NCP_NAME, ofed_version: str = "25.04-0.6.1.0-2", rdma: bool = True,
            sriov: bool = True, upgrade: JSON | None = None) -> JSON:  # fmt: skip
    spec: JSON = {
        "ofedDriver": {**_image("doca-driver", ofed_version), "upgradePolicy": upgrade or {"autoUpgrade": False}},
        "secondaryNetwork": {"multus": _image("multus-cni", "v4.1.0"), "cniPlugins": _image("plugins", "v1.5.0")},
    }
    if rdma:
        spec["rdmaSharedDevicePlugin"] = {
            **_image("k8s-rdma-shared-dev-plugin", "v1.5.3"),
            "config": '{"configList":[{"resourceName":"rdma_shared_device_a","rdmaHcaMax":63,'
                      '"selectors":{"vendors":["15b3"]}}]}',
        }  # fmt: skip
    if sriov:
        spec["sriovDevicePlugin"] = {
            **_image("sriov-network-device-plugin", "v3.9.0"),
            "config": '{"resourceList":[{"resourcePrefix":"nvidia.com","resourceName":"hostdev",'
                      '"selectors":{"vendors":["15b3"],"isRdma":true}}]}',
        }  # fmt: skip
    return {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": name}, "spec": spec}


def _apply(client: Client, obj: JSON) -> None:
    client.apply(codecs.from_dict(obj), field_manager="test", force=True)


def _status(client: Client, resource: Any, name: str) -> JSON:
    obj = client.get(resource, name)
    return dict(obj.to_dict().get("status") or {})


def _ready_time(pod: Pod) -> dt.datetime | None:
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "Ready" and c.status == "True":
            return c.lastTransitionTime
    return None


def _pods_by_node(client: Client, namespace: str, prefix: str) -> dict[str, Pod]:
    out = {}
    for pod in client.list(Pod, namespace=namespace):
        if pod.metadata and str(pod.metadata.name).startswith(prefix) and pod.spec and pod.spec.nodeName:
            out[pod.spec.nodeName] = pod
    return out


def _wait_state(client: Client, namespace: str, state: str, *, timeout: float = 180) -> JSON:
    def check() -> JSON | None:
        status = _status(client, NicClusterPolicyResource, net.NCP_NAME)
        return status if status.get("state") == state else None

    try:
        return wait_for(check, timeout=timeout, describe=f"NicClusterPolicy {state}")
    except Exception:
        print(_status(client, NicClusterPolicyResource, net.NCP_NAME))
        print(explain_pods(client, namespace))
        raise


@pytest.mark.timeout(600)
def test_policy_ready_gated_plugins_pruning_singleton_and_node_policies(
    client: Client, namespace: str, network_operator: NetworkOperatorThread, simulator: Simulator,
    sim_nodes: SimNodesFactory,
) -> None:  # fmt: skip
    nic_nodes = sim_nodes(nic_node_requests(4))
    plain = sim_nodes("cpu-only:1")
    # Without a policy nothing manages a driver: NIC nodes are open ("false", upstream's rule). The
    # policy's OFED section must close them before its plugins exist, or they start ahead of OFED.
    wait_for(
        lambda: all((client.get(Node, n).metadata.labels or {}).get(net.MOFED_WAIT) == "false" for n in nic_nodes),  # type: ignore[union-attr]
        timeout=30, describe="NIC nodes open while no policy manages their driver",
    )  # fmt: skip
    _apply(client, _policy())
    status = _wait_state(client, namespace, net.READY)
    assert {s["name"]: s["state"] for s in status["appliedStates"]}[net.STATE_OFED] == net.READY
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])

    # One OFED DaemonSet per OS/kernel pool; every NIC node labelled mofed.wait=false, others untouched.
    ofed = list(client.list(DaemonSet, namespace=namespace, labels={net.STATE_LABEL: net.STATE_OFED}))
    assert len(ofed) == 2, [d.metadata.name for d in ofed]  # type: ignore[union-attr]
    assert all(d.spec.updateStrategy.type == "OnDelete" for d in ofed)  # type: ignore[union-attr]
    for name in nic_nodes:
        assert (client.get(Node, name).metadata.labels or {}).get(net.MOFED_WAIT) == "false"  # type: ignore[union-attr]
    assert net.MOFED_WAIT not in (client.get(Node, plain[0]).metadata.labels or {})  # type: ignore[union-attr]

    # The RDMA and SR-IOV plugins started on each node only after its OFED container was Ready, and never
    # crashed (their stand-ins exit without .driver-ready).
    ofed_pods = _pods_by_node(client, namespace, net.OFED_DS_PREFIX)
    for prefix in ("rdma-shared-dp", "network-operator-sriov-device-plugin"):
        plugins = _pods_by_node(client, namespace, prefix)
        assert set(plugins) == set(nic_nodes), (prefix, sorted(plugins))
        for node, pod in plugins.items():
            ofed_ready = _ready_time(ofed_pods[node])
            assert ofed_ready is not None
            assert pod.metadata
            assert pod.metadata.creationTimestamp
            assert pod.metadata.creationTimestamp >= ofed_ready
            restarts = [c.restartCount for c in (pod.status.containerStatuses or [])]  # type: ignore[union-attr]
            assert restarts, (node, prefix)
            assert not any(restarts), (node, prefix, restarts)
    # No plugin pod was ever started early and taken back when the gate closed.
    deleted = [
        e.message for e in client.list(Event, namespace=namespace)
        if e.reason == "SuccessfulDelete" and e.involvedObject.kind == "DaemonSet"
        and str(e.involvedObject.name).startswith(("rdma-shared-dp", "network-operator-sriov-device-plugin"))
    ]  # fmt: skip
    assert not deleted, deleted

    # A second policy is ignored, with a reason.
    _apply(client, _policy(name="another-policy"))
    ignored = wait_for(
        lambda: (s := _status(client, NicClusterPolicyResource, "another-policy")).get("state") == net.IGNORE and s,
        timeout=30, describe="second policy ignored",
    )  # fmt: skip
    assert net.NCP_NAME in ignored["reason"]
    of_other = [
        d.metadata.name
        for d in client.list(DaemonSet, namespace=namespace)
        if d.metadata and any(r.name == "another-policy" for r in d.metadata.ownerReferences or [])
    ]
    assert not of_other, of_other

    # Removing a section prunes its objects; the policy is ready again without it.
    _apply(client, _policy(rdma=False))
    wait_for(
        lambda: not list(client.list(DaemonSet, namespace=namespace, labels={net.STATE_LABEL: net.STATE_RDMA_DP}))
        and not list(client.list(ConfigMap, namespace=namespace, labels={net.STATE_LABEL: net.STATE_RDMA_DP})),
        timeout=60, describe="RDMA device plugin objects pruned",
    )  # fmt: skip

    def ready_without_rdma() -> JSON | None:
        status = _status(client, NicClusterPolicyResource, net.NCP_NAME)
        states = {s["name"]: s["state"] for s in status.get("appliedStates") or []}
        return status if status.get("state") == net.READY and states.get(net.STATE_RDMA_DP) == net.IGNORE else None

    wait_for(ready_without_rdma, timeout=60, describe="ready, the RDMA state ignore")

    # NicNodePolicies: one per pool works; one overlapping it is rejected with the nodes named, and one
    # setting a section the NicClusterPolicy has is rejected too.
    pool = "22.04"
    rdma = _policy()["spec"]["rdmaSharedDevicePlugin"]
    first = {"apiVersion": net.API_VERSION, "kind": net.NNP_KIND, "metadata": {"name": "pool-a"},
             "spec": {"nodeSelector": {"feature.node.kubernetes.io/system-os_release.VERSION_ID": pool},
                      "rdmaSharedDevicePlugin": rdma}}  # fmt: skip
    _apply(client, first)
    wait_for(lambda: _status(client, NicNodePolicyResource, "pool-a").get("state") == net.READY, timeout=120,
             describe="pool-a ready")  # fmt: skip
    # pool-a must be strictly older than the overlapping one, and creation timestamps are whole seconds.
    stored: Any = client.get(NicNodePolicyResource, "pool-a").to_dict()  # type: ignore[no-untyped-call]
    created = dt.datetime.fromisoformat(stored["metadata"]["creationTimestamp"])
    wait_for(lambda: dt.datetime.now(dt.UTC).replace(microsecond=0) > created, timeout=5, interval=0.05,
             describe="the next second")  # fmt: skip
    overlapping = {**first, "metadata": {"name": "all-nics"},
                   "spec": {"nodeSelector": {net.NIC_PRESENT: "true"}, "rdmaSharedDevicePlugin": rdma}}  # fmt: skip
    _apply(client, overlapping)
    rejected = wait_for(
        lambda: (s := _status(client, NicNodePolicyResource, "all-nics")).get("state") == net.ERROR and s,
        timeout=30, describe="overlapping NicNodePolicy rejected",
    )  # fmt: skip
    pool_nodes = [n for n in nic_nodes
                  if (client.get(Node, n).metadata.labels or {}).get(  # type: ignore[union-attr]
                      "feature.node.kubernetes.io/system-os_release.VERSION_ID") == pool]  # fmt: skip
    assert pool_nodes
    assert all(n in rejected["reason"] for n in pool_nodes), rejected
    assert "pool-a" in rejected["reason"]
    assert not list(client.list(DaemonSet, namespace=namespace, labels={net.DS_OWNER_LABEL: "all-nics"}))
    sriov_twice = {**first, "metadata": {"name": "sriov-twice"},
                   "spec": {"nodeSelector": {"kubernetes.io/hostname": plain[0]},
                            "sriovDevicePlugin": _policy()["spec"]["sriovDevicePlugin"]}}  # fmt: skip
    _apply(client, sriov_twice)
    twice = wait_for(
        lambda: (s := _status(client, NicNodePolicyResource, "sriov-twice")).get("state") == net.ERROR and s,
        timeout=30, describe="NicNodePolicy with a NicClusterPolicy section rejected",
    )  # fmt: skip
    assert "sriovDevicePlugin" in twice["reason"], twice


class _UpgradeWatch:
    """Samples the nodes' OFED upgrade states and the skip pods while the rollout runs."""

    def __init__(self, client: Client, *, nodes: list[str], namespace: str) -> None:
        self.client, self.nodes, self.namespace = client, nodes, namespace
        self.max_in_progress = 0
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            states = [(self.client.get(Node, n).metadata.labels or {}).get(OFED_STATE_LABEL, "") for n in self.nodes]  # type: ignore[union-attr]
            self.seen.update(states)
            self.max_in_progress = max(self.max_in_progress, sum(s in IN_PROGRESS for s in states))


@pytest.mark.timeout(600)
def test_ofed_version_bump_rolls_every_node_within_max_parallel(
    client: Client, namespace: str, network_operator: NetworkOperatorThread, simulator: Simulator,
    sim_nodes: SimNodesFactory, local_cluster: LocalCluster, tmp_path: Path,
) -> None:  # fmt: skip
    nodes = sim_nodes(nic_node_requests(5))
    upgrade = {"autoUpgrade": True, "maxParallelUpgrades": 2,
               "drain": {"enable": True, "force": True, "deleteEmptyDir": True, "timeoutSeconds": 60}}  # fmt: skip
    _apply(client, _policy(rdma=False, sriov=False, upgrade=upgrade))
    _wait_state(client, namespace, net.READY)
    # The operator's own pod on every node (as the chart labels it) must never be evicted by the drain.
    skip_uids = {}
    for node in nodes:
        name = f"operator-{node}"[:63]
        _apply(client, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {OFED_DRAIN_SKIP: "true"}},
            "spec": {"nodeName": node, "containers": [
                {"name": "operator", "image": "operator:test", "command": ["gpu-operator", "agent", "sleep"]}]},
        })  # fmt: skip
        skip_uids[name] = client.get(Pod, name, namespace=namespace).metadata.uid  # type: ignore[union-attr]
    before = {n: p.metadata.uid for n, p in _pods_by_node(client, namespace, net.OFED_DS_PREFIX).items()}  # type: ignore[union-attr]
    assert set(before) == set(nodes)

    # The preview of the change, from the live cluster (a server-side dry run of the proposed policy).
    proposed = _policy(rdma=False, sriov=False, upgrade=upgrade, ofed_version=NEW_OFED)
    proposed_file = tmp_path / "ncp.yaml"
    proposed_file.write_text(yaml.safe_dump(proposed), encoding="utf-8")
    shown = CliRunner().invoke(cli, [
        "upgrade", "plan", "--driver", "ofed", "--kubeconfig", str(local_cluster.kubeconfig_path),
        "--namespace", namespace, "--policy", str(proposed_file), "-o", "json",
    ])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert report["driver"] == "ofed"
    waves = [sorted(w["nodes"]) for w in report["waves"]]
    assert [len(w) for w in waves] == [2, 2, 1], waves
    assert sorted(n for w in waves for n in w) == sorted(nodes)
    assert not any((client.get(Node, n).metadata.labels or {}).get(OFED_STATE_LABEL) not in (None, "", "upgrade-done")  # type: ignore[union-attr]
                   for n in nodes)  # the preview changed nothing  # fmt: skip

    watch = _UpgradeWatch(client, nodes=nodes, namespace=namespace)
    watch.thread.start()
    try:
        client.patch(NicClusterPolicyResource, net.NCP_NAME,
                     {"spec": {"ofedDriver": {"version": NEW_OFED}}}, patch_type=PatchType.MERGE)  # fmt: skip

        def all_done() -> bool:
            states = {(client.get(Node, n).metadata.labels or {}).get(OFED_STATE_LABEL) for n in nodes}  # type: ignore[union-attr]
            pods = _pods_by_node(client, namespace, net.OFED_DS_PREFIX)
            fresh = all(
                n in pods
                and pods[n].metadata.uid != before[n]  # type: ignore[union-attr]
                and "25.07" in str(pods[n].spec.containers[0].image)  # type: ignore[union-attr]
                for n in nodes
            )
            return states == {"upgrade-done"} and fresh

        wait_for(all_done, timeout=300, describe="every node upgrade-done on the new OFED version")
    finally:
        watch.stop.set()
        watch.thread.join()
    assert 1 <= watch.max_in_progress <= 2, watch.max_in_progress
    assert watch.seen & IN_PROGRESS
    for name, uid in skip_uids.items():
        pod = client.get(Pod, name, namespace=namespace)
        assert pod.metadata
        assert pod.metadata.uid == uid, name
        assert not pod.metadata.deletionTimestamp, name
    for node in nodes:
        labels = client.get(Node, node).metadata.labels or {}  # type: ignore[union-attr]
        assert not any(k.startswith("nvidia.com/gpu-driver-upgrade") for k in labels), labels
        assert not client.get(Node, node).spec.unschedulable  # type: ignore[union-attr]
    _wait_state(client, namespace, net.READY)


@pytest.mark.timeout(300)
def test_networks_become_network_attachment_definitions(
    client: Client, namespace: str, network_operator: NetworkOperatorThread
) -> None:
    from gpu_operator.kube.api import HostDeviceNetworkResource, MacvlanNetworkResource, NADResource  # noqa: PLC0415

    ipam = '{"type":"host-local","subnet":"192.0.2.0/24","rangeStart":"192.0.2.10","rangeEnd":"192.0.2.20"}'
    macvlan = {
        "apiVersion": net.API_VERSION,
        "kind": net.MACVLAN_KIND,
        "metadata": {"name": "macvlan-a"},
        "spec": {"networkNamespace": namespace, "master": "eth1", "mode": "bridge", "mtu": 1500, "ipam": ipam},
    }
    hostdev = {"apiVersion": net.API_VERSION, "kind": net.HOSTDEVICE_KIND, "metadata": {"name": "hostdev-a"},
               "spec": {"networkNamespace": namespace, "resourceName": "hostdev", "ipam": ipam}}  # fmt: skip
    _apply(client, macvlan)
    _apply(client, hostdev)
    try:
        for resource, name, field in (
            (MacvlanNetworkResource, "macvlan-a", "macvlanNetworkAttachmentDef"),
            (HostDeviceNetworkResource, "hostdev-a", "hostDeviceNetworkAttachmentDef"),
        ):

            def ready(r: Any = resource, n: str = name) -> JSON | None:
                status = _status(client, r, n)
                return status if status.get("state") == net.READY else None

            status = wait_for(ready, timeout=60, describe=f"{name} ready")
            assert status[field].endswith(f"/namespaces/{namespace}/NetworkAttachmentDefinition/{name}"), status
        nad = client.get(NADResource, "macvlan-a", namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
        config = yaml.safe_load(nad["spec"]["config"])
        plugin = config["plugins"][0] if "plugins" in config else config
        assert (plugin["type"], plugin["master"], plugin["mode"]) == ("macvlan", "eth1", "bridge")
        assert plugin["ipam"]["subnet"] == "192.0.2.0/24"
        hostdev_nad = client.get(NADResource, "hostdev-a", namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
        assert hostdev_nad["metadata"]["annotations"][net.NAD_RESOURCE_NAME] == "nvidia.com/hostdev"
        # Owned by its network (the live object's uid), so the garbage collector deletes it with the network.
        owner = client.get(MacvlanNetworkResource, "macvlan-a").metadata
        refs = nad["metadata"]["ownerReferences"]
        assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [(net.MACVLAN_KIND, "macvlan-a", owner.uid)]  # type: ignore[union-attr]
    finally:
        client.delete(MacvlanNetworkResource, "macvlan-a")
        client.delete(HostDeviceNetworkResource, "hostdev-a")
