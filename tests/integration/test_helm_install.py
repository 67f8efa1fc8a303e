"""`helm install` of the chart really runs the operator: as a pod, on a simulated node, as its service account.

The real `helm` installs deploy/helm/gpu-operator (CRDs, RBAC, the operator Deployment and the chart's
ClusterPolicy) into the test's namespace. The Deployment's pod is bound to a simulated node, whose kubelet
runs ``gpu-operator operator`` in-process with the pod's args, env and service-account token
(``gpu_operator.sim.programs.operatorpod``), so the chart's Role and ClusterRole are what authorizes the operator.
The policy reaches ready on two GPU nodes; the pod's own token is the chart's service account and is
denied what the operator must not do; a crashed operator container restarts; `helm uninstall` takes
the policy, the operands and the operator away.
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.rbac_authorization_v1 import ClusterRole

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.volumes import loopback_for
from gpu_operator.sim.programs.agents import agent_registry
from tests.chart_checks import POLICY, exists, operator_pods, policy_state
from tests.conftest import REPO
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
CHART = REPO / "deploy" / "helm" / "gpu-operator"
PROGRAMS = (
    *("operator", "device-plugin", "feature-discovery", "exporter", "validator", "toolkit", "driver"),
    *("node-status-exporter", "mig-manager", "driver-manager"),
)
OPERANDS = (
    "nvidia-driver-daemonset",
    "nvidia-container-toolkit-daemonset",
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
)


def _service_account_dir(simulator: Simulator, pod: JSON) -> Path:
    """The pod's projected service-account volume on its simulated node (what the program reads)."""
    (volume,) = [str(v["name"]) for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    pod_dir = simulator.node(pod["spec"]["nodeName"]).host_root / "var" / "lib" / "kubelet" / "pods"
    return pod_dir / str(pod["metadata"]["uid"]) / "volumes" / volume


def _as_pod(cluster: LocalCluster, account_dir: Path, path: str, spec: JSON) -> JSON:
    """POST a self-review with the pod's own token, trusting only the pod's CA file."""
    token = (account_dir / "token").read_text(encoding="utf-8")
    kind = "SelfSubjectReview" if path.endswith("selfsubjectreviews") else "SelfSubjectAccessReview"
    group = path.split("/")[2]
    body = {"apiVersion": f"{group}/v1", "kind": kind, "spec": spec}
    trusted = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))
    with httpx.Client(verify=trusted, trust_env=False) as http:
        answer = http.post(f"{cluster.server}{path}", json=body, headers={"Authorization": f"Bearer {token}"})
    answer.raise_for_status()
    result: JSON = answer.json()
    return result


def _pod_may(cluster: LocalCluster, account_dir: Path, **attributes: str) -> bool:
    review = _as_pod(
        cluster, account_dir, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {"resourceAttributes": attributes},
    )  # fmt: skip
    return bool(review["status"]["allowed"])


def _can(cluster: LocalCluster, namespace: str, *args: str) -> bool:
    account = f"system:serviceaccount:{namespace}:gpu-operator"
    return cluster.kubectl("auth", "can-i", *args, "--as", account, check=False).stdout.strip() == "yes"


@pytest.fixture
def release(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[str]:
    """A release name; whatever the test left installed is uninstalled after it."""
    name = f"gpuop-{secrets.token_hex(3)}"
    yield name
    local_cluster.helm("uninstall", name, "-n", namespace, "--ignore-not-found", check=False, timeout=120)
    for obj in client.list(ClusterPolicyResource):
        client.delete(ClusterPolicyResource, str(obj.metadata.name))  # type: ignore[union-attr]


@pytest.mark.timeout(240)
def test_helm_install_runs_the_operator_as_a_pod(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    release: str,
    tmp_path: Path,
) -> None:
    registry = agent_registry()
    for name in PROGRAMS:
        spec = registry.get(name)
        assert spec is not None, name
        sim_program(name, spec.entrypoint)
    dgx, l4, cpu = sim_nodes("dgx-h100:1,pcie-l4:1,cpu-only:1")
    # The chart's defaults schedule the operator on any Linux node; the test pins it to its own CPU node so
    # that it never lands on a node of another test, and so that GPU nodes keep only operands.
    values = tmp_path / "values.yaml"
    selector = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": cpu}
    values.write_text(yaml.safe_dump({"operator": {"nodeSelector": selector}}), encoding="utf-8")

    local_cluster.helm("install", release, str(CHART), "-n", namespace, "-f", str(values), "--wait",
                       "--timeout", "90s", timeout=120)  # fmt: skip

    # --wait returned: the Deployment is available, i.e. the program reported Ready after a first pass.
    (pod,) = operator_pods(client, namespace)
    assert pod["spec"]["nodeName"] == cpu
    assert pod["spec"]["serviceAccountName"] == "gpu-operator"
    assert pod["status"]["phase"] == "Running"
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True
    assert status["containerID"].startswith("sim://")

    # The operator authenticates with the pod's token: the chart's service account, nothing more.
    account_dir = _service_account_dir(simulator, pod)
    review = _as_pod(local_cluster, account_dir, "/apis/authentication.k8s.io/v1/selfsubjectreviews", {})
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:gpu-operator"

    wait_for(lambda: policy_state(client) == "ready", timeout=150, describe="the chart's ClusterPolicy ready")
    policy: JSON = client.get(ClusterPolicyResource, POLICY).to_dict()  # type: ignore[no-untyped-call]
    assert policy["status"]["namespace"] == namespace
    for name in OPERANDS:
        ds = client.get(DaemonSet, name, namespace=namespace).to_dict()
        assert ds["status"]["desiredNumberScheduled"] == 2, name  # the H100 and L4 nodes, not the CPU node
        assert ds["status"]["numberReady"] == 2, name
    for node in (dgx, l4):
        assert simulator.node(node).workers, node
    (pod,) = operator_pods(client, namespace)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # no crash on the way (e.g. a 403)

    # The pod serves /metrics on its own address, as the container does on :8080.
    url = f"http://{loopback_for(pod['status']['podIP'])}:8080/metrics"
    metrics = httpx.get(url, timeout=5, trust_env=False).text
    assert "gpu_operator_reconciliation_status 1" in metrics

    # RBAC is enforced for that identity: allowed what it does, denied what it must not do.
    assert _pod_may(local_cluster, account_dir, verb="patch", resource="nodes")
    assert _pod_may(local_cluster, account_dir, verb="create", group="apps", resource="daemonsets",
                    namespace=namespace)  # fmt: skip
    assert not _pod_may(local_cluster, account_dir, verb="get", resource="secrets", namespace="kube-system")
    assert not _pod_may(local_cluster, account_dir, verb="delete", resource="nodes")
    assert not _can(local_cluster, namespace, "list", "secrets", "-n", "default")
    assert not _can(local_cluster, namespace, "create", "daemonsets", "-n", "kube-system")
    assert not _can(local_cluster, namespace, "patch", "clusterroles/cluster-admin")

    # A crashed operator container restarts in place and takes its Lease back; the policy stays ready.
    simulator.crash(cpu, namespace=namespace, program="operator")

    def restarted() -> bool:
        (again,) = operator_pods(client, namespace)
        (status,) = again["status"]["containerStatuses"]
        return bool(status["restartCount"] == 1 and status["ready"]) and policy_state(client) == "ready"

    wait_for(restarted, timeout=30, describe="the operator container restarted and ready")

    local_cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", timeout=90)

    def gone() -> bool:
        left = [n for n in OPERANDS if exists(client, DaemonSet, n, namespace)]
        return (
            policy_state(client) is None
            and not left
            and not operator_pods(client, namespace)
            and not exists(client, ClusterRole, "gpu-operator", None)
            and not exists(client, ClusterRole, "nvidia-device-plugin", None)  # an operand's, owned by the policy
        )

    wait_for(gone, timeout=60, describe="the policy, its operands and the operator removed")
    assert not list(client.list(ClusterPolicyResource))
