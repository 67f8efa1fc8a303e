"""`helm install` of the network chart really runs the network operator: as a pod, as its service account.

The real `helm` installs deploy/helm/network-operator (CRDs from crds/, the generated RBAC, the
operator Deployment and, with ``nicClusterPolicy.deploy``, the NicClusterPolicy) into the test's
namespace. The Deployment's pod is bound to a simulated node, whose kubelet runs ``gpu-operator
network-operator`` in-process with the pod's args, env and service-account token
(``gpu_operator.sim.programs.netoperatorpod``), so every request the operator makes is authorized by
the chart's Role and ClusterRole (``render/network_rbac.py``): a rule missing there fails this test.
The policy reaches ready on three simulated NIC nodes, the operator holds its Lease and serves its
metrics; `helm uninstall` takes the operator and the policy away and leaves the CRDs (Helm never
deletes crds/).
"""

from __future__ import annotations

import logging
import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from lightkube import ApiError, Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.kube.api import NicClusterPolicyResource
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import network as net
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.volumes import loopback_for
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.shapes import nic_node_requests
from tests.chart_checks import exists
from tests.conftest import REPO
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, explain_pods

JSON = dict[str, Any]
CHART = REPO / "deploy" / "helm" / "network-operator"
PROGRAM = "network-operator"
ACCOUNT = "network-operator"  # the chart's fixed ServiceAccount name
DRAIN_SKIP = f"nvidia.com/{net.OFED_DRIVER_NAME}-driver-upgrade-drain.skip"
MELLANOX_PLURALS = ("nicclusterpolicies", "nicnodepolicies", "macvlannetworks", "hostdevicenetworks", "ipoibnetworks")
CRDS = (*(f"{plural}.mellanox.com" for plural in MELLANOX_PLURALS), "network-attachment-definitions.k8s.cni.cncf.io")


def _image(name: str, version: str) -> JSON:
    return {"image": name, "repository": "nvcr.io/nvidia/mellanox", "version": version}


#: The chart's nicClusterPolicy.spec: OFED, the RDMA shared device plugin (gated on mofed.wait=false), Multus.
POLICY_SPEC: JSON = {
    "ofedDriver": {**_image("doca-driver", "25.04-0.6.1.0-2"), "upgradePolicy": {"autoUpgrade": False}},
    "rdmaSharedDevicePlugin": {
        **_image("k8s-rdma-shared-dev-plugin", "v1.5.3"),
        "config": '{"configList":[{"resourceName":"rdma_shared_device_a","rdmaHcaMax":63,'
        '"selectors":{"vendors":["15b3"]}}]}',
    },
    "secondaryNetwork": {"multus": _image("multus-cni", "v4.1.0")},
}


def operator_pods(client: Client, namespace: str) -> list[JSON]:
    return [p.to_dict() for p in client.list(Pod, namespace=namespace, labels={"app": "network-operator"})]


def policy_status(client: Client) -> JSON:
    try:
        obj: JSON = client.get(NicClusterPolicyResource, net.NCP_NAME).to_dict()  # type: ignore[no-untyped-call]
    except ApiError as error:
        if error.status.code == 404:
            return {}
        raise
    return dict(obj.get("status") or {})


def _username_of_pod_token(cluster: LocalCluster, simulator: Simulator, pod: JSON) -> str:
    """Who the pod's projected token (what the program authenticates with) is, by a SelfSubjectReview."""
    (volume,) = [str(v["name"]) for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    pods_dir = simulator.node(pod["spec"]["nodeName"]).host_root / "var" / "lib" / "kubelet" / "pods"
    account_dir = pods_dir / str(pod["metadata"]["uid"]) / "volumes" / volume
    token = (account_dir / "token").read_text(encoding="utf-8")
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    trusted = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))
    with httpx.Client(verify=trusted, trust_env=False) as http:
        answer = http.post(f"{cluster.server}/apis/authentication.k8s.io/v1/selfsubjectreviews", json=body,
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    answer.raise_for_status()
    return str(answer.json()["status"]["userInfo"]["username"])


@pytest.fixture
def release(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[str]:
    """A release name; whatever the test left installed is uninstalled after it, and the chart's policy is
    deleted (the session's other network tests expect no NicClusterPolicy). The CRDs stay, as Helm leaves them."""
    name = f"netop-{secrets.token_hex(3)}"
    yield name
    local_cluster.helm("uninstall", name, "-n", namespace, "--ignore-not-found", check=False, timeout=120)
    for obj in client.list(NicClusterPolicyResource):
        client.delete(NicClusterPolicyResource, str(obj.metadata.name))  # type: ignore[union-attr]


@pytest.mark.timeout(300)
def test_helm_install_runs_the_network_operator_as_a_pod(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    release: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The operator runs in this process: a request its RBAC refuses shows in its logs as ``http_403``.
    caplog.set_level(logging.INFO, logger="gpu_operator")
    spec = agent_registry().get(PROGRAM)
    assert spec is not None
    sim_program(PROGRAM, spec.entrypoint)  # the session simulator has the operands' stand-ins already
    nic_nodes = sim_nodes(nic_node_requests(3))
    (home,) = sim_nodes("cpu-only:1")
    # The chart's defaults schedule the operator on any Linux node; pinned to this test's own node without
    # NICs, it never lands on another test's node and the NIC nodes keep only operands.
    values = tmp_path / "values.yaml"
    selector = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": home}
    values.write_text(
        yaml.safe_dump({"operator": {"nodeSelector": selector}, "nicClusterPolicy": {"spec": POLICY_SPEC}}),
        encoding="utf-8",
    )

    # crds/ may be installed already (another test applied deploy/crds): Helm skips existing ones.
    local_cluster.helm("install", release, str(CHART), "-n", namespace, "-f", str(values),
                       "--set", "nicClusterPolicy.deploy=true", "--wait", "--timeout", "90s", timeout=120)  # fmt: skip

    # --wait returned: the Deployment is available, i.e. the program reported Ready after a first pass.
    (pod,) = operator_pods(client, namespace)
    assert pod["spec"]["nodeName"] == home
    assert pod["spec"]["serviceAccountName"] == ACCOUNT
    assert pod["metadata"]["labels"][DRAIN_SKIP] == "true"  # OFED upgrades never drain the operator
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True
    assert status["containerID"].startswith("sim://")
    username = _username_of_pod_token(local_cluster, simulator, pod)
    assert username == f"system:serviceaccount:{namespace}:{ACCOUNT}"

    def ready() -> bool:
        return policy_status(client).get("state") == net.READY

    try:
        wait_for(ready, timeout=180, describe="the chart's NicClusterPolicy ready")
    except Exception:
        print(policy_status(client))
        print(explain_pods(client, namespace))
        raise
    # No crash on the way (a 403 from a missing rule ends the operator's loop and restarts the container).
    (pod,) = operator_pods(client, namespace)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    # Every NIC node is released to the gated plugins; the operator alone writes that label.
    for name in nic_nodes:
        labels = client.get(Node, name).metadata.labels or {}  # type: ignore[union-attr]
        assert labels.get(net.MOFED_WAIT) == "false", name

    # The Lease is the pod's: held under upstream's ID and owned by the pod, so it goes with it.
    lease = client.get(Lease, net.LEASE_NAME, namespace=namespace)
    assert lease.spec is not None
    assert lease.spec.holderIdentity
    assert [(o.kind, o.name) for o in lease.metadata.ownerReferences or ()] == [  # type: ignore[union-attr]
        ("Pod", pod["metadata"]["name"])
    ]

    # /metrics on the pod's own address, as the container serves it on :8080.
    url = f"http://{loopback_for(pod['status']['podIP'])}:8080/metrics"

    def metrics_ready() -> bool:
        return "network_operator_reconciliation_status 1\n" in httpx.get(url, timeout=5, trust_env=False).text

    wait_for(metrics_ready, timeout=30, describe="network_operator_reconciliation_status 1")

    # Nothing was refused on the way. A refused watch fails no pass: the informer lists again, and again,
    # so each cache must have listed once; a refused request in a pass counts as a loop error.
    metrics = httpx.get(url, timeout=5, trust_env=False).text
    lists = [line for line in metrics.splitlines() if line.startswith("gpu_operator_cache_lists_total{")]
    relisted = [line for line in lists if not line.endswith("} 1")]
    assert lists
    assert not relisted, relisted
    assert 'error="http_403"' not in metrics
    refused = [
        r.getMessage() for r in caplog.records if r.name.startswith("gpu_operator") and "http_403" in r.getMessage()
    ]
    assert not refused, refused

    local_cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", timeout=90)

    def gone() -> bool:
        return (
            not exists(client, Deployment, "network-operator", namespace)
            and not operator_pods(client, namespace)
            and not exists(client, NicClusterPolicyResource, net.NCP_NAME, None)
        )

    wait_for(gone, timeout=60, describe="the operator and its policy removed")
    for crd in CRDS:  # Helm installs crds/ but never upgrades or deletes them
        assert exists(client, CustomResourceDefinition, crd, None), crd
