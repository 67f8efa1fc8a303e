"""The operator end to end on the real control plane with simulated GPU nodes.

A ClusterPolicy brings every enabled state to ready on 4 nodes (two GPU profiles, one MIG-capable,
one CPU-only that gets no operand); a user's ``gpu.deploy.dcgm-exporter=false`` removes that operand
from one node only; a spec change reaches the DaemonSet and the policy comes back to ready; disabling
a state prunes its objects; a second policy is ignored; deleting the policy removes what it created.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod
from lightkube.types import PatchType

from gpu_operator.cli.main import cli
from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.programs.agents import agent_registry
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import OPERAND_AGENTS, SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]


def _policy(name: str, spec: JSON) -> Any:
    return codecs.from_dict(
        {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}
    )


def _state(client: Client, name: str) -> str | None:
    obj: JSON = client.get(ClusterPolicyResource, name).to_dict()  # type: ignore[no-untyped-call]
    status = obj.get("status") or {}
    return status.get("state")


def _desired(client: Client, name: str, namespace: str) -> int | None:
    try:
        ds = client.get(DaemonSet, name, namespace=namespace).to_dict()
    except Exception:
        return None
    return int((ds.get("status") or {}).get("desiredNumberScheduled", 0))


@pytest.mark.timeout(420)
def test_policy_to_ready_nodes_and_back(
    client: Client,
    namespace: str,
    operator: OperatorThread,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    registry = agent_registry()
    for name in OPERAND_AGENTS:
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)
    dgx, l4, a100, cpu = sim_nodes("dgx-h100:1,pcie-l4:1,a100-mig:1,cpu-only:1")
    gpu_nodes = {dgx, l4, a100}
    # As the Helm chart's values do: the exporter embeds the host engine, no standalone DCGM.
    client.create(_policy("cluster-policy", {"dcgm": {"enabled": False}, "psa": {"enabled": True}}))

    wait_for(lambda: _state(client, "cluster-policy") == "ready", timeout=240, describe="ClusterPolicy ready")
    policy: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    ready = next(c for c in policy["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")
    assert ready["observedGeneration"] == policy["metadata"]["generation"]
    assert policy["status"]["namespace"] == namespace
    events = [
        e.to_dict() for e in client.list(Event, namespace="default", fields={"involvedObject.name": "cluster-policy"})
    ]
    assert "Reconciled" in {e["reason"] for e in events}  # the transition to ready was recorded
    ns_labels = client.get(Namespace, namespace).metadata.labels or {}  # type: ignore[union-attr]
    assert ns_labels.get("pod-security.kubernetes.io/enforce") == "privileged"
    for ds in (
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-operator-validator",
        "nvidia-container-toolkit-daemonset",
        "nvidia-driver-daemonset",
    ):
        assert _desired(client, ds, namespace) == 3, ds
    assert _desired(client, "nvidia-mig-manager", namespace) == 2  # H100 and A100 are MIG-capable, L4 is not
    on_cpu = [p for p in client.list(Pod, namespace=namespace) if p.spec and p.spec.nodeName == cpu]
    assert on_cpu == []
    assert client.get(Node, cpu).metadata.labels.get("nvidia.com/gpu.deploy.driver") is None  # type: ignore[union-attr]
    for node in gpu_nodes:
        assert client.get(Node, node).status.allocatable  # type: ignore[union-attr]

    # `gpu-operator status` explains the same state from the API alone.
    kubeconfig = str(operator.cluster.kubeconfig_path)
    shown = CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig, "-o", "json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert sorted(n["node"] for n in report["nodes"]) == sorted(gpu_nodes)
    assert all(n["ready"] for n in report["nodes"]), report["nodes"]
    one = CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig, "--node", dgx])
    assert one.exit_code == 0, one.output
    assert "device-plugin" in one.output
    assert "done" in one.output
    assert CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig, "--node", cpu]).exit_code == 1

    # Restarting the operator (a new process would do the same) converges without touching operands.
    def operand_pods() -> dict[str, str]:
        pods = [p.to_dict() for p in client.list(Pod, namespace=namespace)]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}

    def generations() -> dict[str, int]:
        sets = [d.to_dict() for d in client.list(DaemonSet, namespace=namespace)]
        return {d["metadata"]["name"]: int(d["metadata"].get("generation", 0)) for d in sets}

    pods_before, generations_before = operand_pods(), generations()
    operator.restart()
    # Its first pass (at once on taking the Lease) reconciles everything; an idle cluster wakes it no more,
    # so a second pass is forced with a harmless annotation on the policy.
    wait_for(
        lambda: operator.operator is not None and operator.operator.passes >= 1,
        timeout=60,
        describe="a first pass of the restarted operator",
    )
    client.patch(
        ClusterPolicyResource, "cluster-policy", {"metadata": {"annotations": {"test/poke": "1"}}},
        patch_type=PatchType.MERGE,
    )  # fmt: skip
    wait_for(
        lambda: operator.operator is not None and operator.operator.passes >= 2,
        timeout=60,
        describe="two passes of the restarted operator",
    )
    assert _state(client, "cluster-policy") == "ready"
    assert operand_pods() == pods_before
    assert generations() == generations_before

    # A user's opt-out removes one operand from one node only.
    client.patch(Node, l4, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm-exporter": "false"}}})
    wait_for(lambda: _desired(client, "nvidia-dcgm-exporter", namespace) == 2, timeout=30, describe="exporter on 2")
    assert _desired(client, "nvidia-device-plugin-daemonset", namespace) == 3

    # A spec change reaches the DaemonSet; the policy passes through notReady back to ready.
    image = "registry.example.internal/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    client.patch(
        ClusterPolicyResource,
        "cluster-policy",
        {
            "spec": {
                "dcgmExporter": {
                    "repository": "registry.example.internal/nvidia/k8s",
                    "image": "dcgm-exporter",
                    "version": "4.6.0-4.8.3-distroless",
                }
            }
        },
        patch_type=PatchType.MERGE,
    )

    def exporter_image() -> str:
        ds = client.get(DaemonSet, "nvidia-dcgm-exporter", namespace=namespace).to_dict()
        return str(ds["spec"]["template"]["spec"]["containers"][0]["image"])

    wait_for(lambda: exporter_image() == image, timeout=30, describe="new exporter image on the DaemonSet")
    wait_for(lambda: _state(client, "cluster-policy") == "ready", timeout=120, describe="ready after the change")

    # A valid but impossible policy (a ConfigMap it names does not exist) says so in its status.
    client.patch(
        ClusterPolicyResource,
        "cluster-policy",
        {"spec": {"devicePlugin": {"config": {"name": "no-such-configmap", "default": "any"}}}},
        patch_type=PatchType.MERGE,
    )

    def error_message() -> str | None:
        obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
        status = obj.get("status") or {}
        error: JSON = next((c for c in status.get("conditions", []) if c["type"] == "Error"), {})
        text = str(error.get("message", ""))
        return text if status.get("state") == "notReady" and "no-such-configmap" in text else None

    message = wait_for(error_message, timeout=30, describe="notReady naming the missing ConfigMap")
    assert "state-device-plugin" in message
    client.patch(
        ClusterPolicyResource,
        "cluster-policy",
        {"spec": {"devicePlugin": {"config": None}}},
        patch_type=PatchType.MERGE,
    )
    wait_for(lambda: _state(client, "cluster-policy") == "ready", timeout=120, describe="ready again")

    # Disabling a state prunes its objects.
    client.patch(
        ClusterPolicyResource,
        "cluster-policy",
        {"spec": {"gfd": {"enabled": False}}},
        patch_type=PatchType.MERGE,
    )
    wait_for(lambda: _desired(client, "gpu-feature-discovery", namespace) is None, timeout=30, describe="GFD pruned")

    # A second policy is ignored.
    client.create(_policy("second-policy", {}))
    wait_for(lambda: _state(client, "second-policy") == "ignored", timeout=30, describe="second policy ignored")
    ignored = client.list(Event, namespace="default", fields={"involvedObject.name": "second-policy"})
    assert [e.reason for e in ignored] == ["Ignored"]
    client.delete(ClusterPolicyResource, "second-policy")

    # Deleting the policy removes what it created (owner references, the real garbage collector).
    client.delete(ClusterPolicyResource, "cluster-policy")
    wait_for(
        lambda: _desired(client, "nvidia-device-plugin-daemonset", namespace) is None,
        timeout=60,
        describe="operands garbage-collected",
    )
