"""The driver manager and the driver program on simulated nodes of the real control plane: a pre-installed
host driver is detected and labelled; GPU pods are evicted through the Eviction API, so a
PodDisruptionBudget that allows no disruption stops the uninstall (nothing deleted, node uncordoned,
operand labels restored) until the budget allows it; operands are paused meanwhile and restored after;
the driver program then loads the simulated driver and writes its readiness file."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget

from gpu_operator.agents.drivermanager import driver, manager
from gpu_operator.kube.nodecluster import RestCluster
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.node import NodeOptions
from gpu_operator.sim.programs.context import ProgramContext
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory
from tests.integration.test_migmanager_sim import ClusterContext, agent_pod, with_cluster

JSON = dict[str, Any]
DP = "nvidia.com/gpu.deploy.device-plugin"
TK = "nvidia.com/gpu.deploy.container-toolkit"
DRIVER = "nvidia.com/gpu.deploy.driver"


def _register(sim_program: SimProgramFactory, simulator: Simulator, local_cluster: LocalCluster) -> None:
    """The driver manager gets a RestCluster over the simulator's own API client (what the sim context can
    provide at scale); the driver program a LightkubeCluster (what a real node's context provides)."""

    async def driver_manager(ctx: ProgramContext) -> None:
        cluster = RestCluster(api=simulator.core.api, node_name=ctx.node_name)
        await manager.main(ClusterContext(inner=ctx, cluster=cluster))

    sim_program("driver-manager", driver_manager)
    sim_program("driver", with_cluster(driver.main, kubeconfig=local_cluster.kubeconfig_path))


def _run_once(client: Client, *, namespace: str, name: str, node: str, env: Mapping[str, str]) -> JSON:
    pod = agent_pod(name=name, namespace=namespace, node=node, program="driver-manager", env=env)
    pod["spec"]["restartPolicy"] = "Never"
    client.create(codecs.from_dict(pod))
    return _finished(client, namespace=namespace, name=name)


def _finished(client: Client, *, namespace: str, name: str, timeout: float = 60) -> JSON:
    def done() -> JSON | None:
        status = client.get(Pod, name, namespace=namespace).to_dict().get("status", {})
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    result: JSON = wait_for(done, timeout=timeout, describe=f"pod {name} finished")
    return result


def _message(status: JSON) -> str:
    state = status["containerStatuses"][0]["state"]
    return str(state.get("terminated", {}).get("message", ""))


def _labels(client: Client, node: str) -> dict[str, str]:
    return dict(client.get(Node, node).metadata.labels or {})  # type: ignore[union-attr]


def _gpu_workload(*, namespace: str, node: str) -> list[JSON]:
    labels = {"app": "trainer"}
    container = {
        "name": "train",
        "image": "trainer:test",
        "command": ["gpu-operator", "agent", "sleep"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]},
            },
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    return [deployment, pdb]


def _trainer_pods(client: Client, namespace: str) -> list[str]:
    return sorted(p.metadata.name for p in client.list(Pod, namespace=namespace, labels={"app": "trainer"}))  # type: ignore[union-attr, misc]


@pytest.mark.timeout(90)
def test_pre_installed_driver_is_labelled(
    *,
    client: Client,
    namespace: str,
    local_cluster: LocalCluster,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    (node,) = sim_nodes("pcie-t4:1")
    _register(sim_program, simulator, local_cluster)
    smi = simulator.node(node).host_root / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text("#!/bin/sh\n# driver_version=535.161.08\n")
    client.patch(Node, node, {"metadata": {"labels": {DRIVER: "true"}}})
    status = _run_once(client, namespace=namespace, name="dm", node=node, env={"PREINSTALLED_WAIT_SECONDS": "0"})
    assert status["phase"] == "Failed"
    assert "a driver (535.161.08) is installed on the host" in _message(status)
    assert _labels(client, node)[DRIVER] == "pre-installed"


@pytest.mark.timeout(120)
def test_eviction_respects_the_pdb_and_operands_are_restored(
    *,
    client: Client,
    namespace: str,
    local_cluster: LocalCluster,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    (node,) = sim_nodes("pcie-l4:1", options=NodeOptions(gpu_plugin="local"))
    _register(sim_program, simulator, local_cluster)
    host = simulator.node(node).host_root
    (host / "sys/module/nvidia").mkdir(parents=True)
    (host / "sys/module/nvidia/refcnt").write_text("0\n")  # a driver is loaded: the full uninstall path
    client.patch(Node, node, {"metadata": {"labels": {DP: "true", TK: "true", DRIVER: "true"}}})
    for obj in _gpu_workload(namespace=namespace, node=node):
        client.create(codecs.from_dict(obj))
    wait_for(
        lambda: client.get(PodDisruptionBudget, "trainer", namespace=namespace).status.currentHealthy == 1,  # type: ignore[union-attr]
        timeout=60,
        describe="the PDB sees its healthy pod",
    )
    (trainer,) = _trainer_pods(client, namespace)

    env = {"EVICTION_TIMEOUT_SECONDS": "3", "OPERAND_WAIT_SECONDS": "10"}
    pod = agent_pod(name="dm-1", namespace=namespace, node=node, program="driver-manager", env=env)
    pod["spec"]["restartPolicy"] = "Never"
    client.create(codecs.from_dict(pod))
    seen: set[tuple[str | None, bool]] = set()
    deadline = time.monotonic() + 60
    while client.get(Pod, "dm-1", namespace=namespace).to_dict().get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    ):
        assert time.monotonic() < deadline, "driver manager did not finish"
        current = client.get(Node, node).to_dict()
        seen.add((current["metadata"].get("labels", {}).get(DP), bool(current.get("spec", {}).get("unschedulable"))))
        time.sleep(0.05)
    status = _finished(client, namespace=namespace, name="dm-1")
    assert status["phase"] == "Failed"
    assert f"{namespace}/{trainer} (blocked by a PodDisruptionBudget)" in _message(status)
    assert ("paused-for-driver-upgrade", True) in seen, "operands paused and node cordoned during the attempt"
    assert _trainer_pods(client, namespace) == [trainer], "the PDB-protected pod was not deleted"
    labels = _labels(client, node)
    assert (labels[DP], labels[TK]) == ("true", "true")
    assert not client.get(Node, node).spec.unschedulable  # type: ignore[union-attr]
    assert (host / "sys/module/nvidia/refcnt").exists(), "no module unloaded"

    # The budget now allows the disruption: the same steps evict the pod and unload the driver.
    client.patch(PodDisruptionBudget, "trainer", {"spec": {"minAvailable": 0}}, namespace=namespace)
    wait_for(
        lambda: client.get(PodDisruptionBudget, "trainer", namespace=namespace).status.disruptionsAllowed == 1,  # type: ignore[union-attr]
        timeout=30,
        describe="the PDB allows a disruption",
    )
    status = _run_once(
        client, namespace=namespace, name="dm-2", node=node, env={**env, "EVICTION_TIMEOUT_SECONDS": "30"}
    )
    assert status["phase"] == "Succeeded", _message(status)
    assert trainer not in _trainer_pods(client, namespace), "evicted"
    assert not (host / "sys/module/nvidia/refcnt").exists(), "nvidia unloaded"
    labels = _labels(client, node)
    assert (labels[DP], labels[TK]) == ("true", "true")
    assert not client.get(Node, node).spec.unschedulable  # type: ignore[union-attr]

    # The driver container then loads the (simulated) driver and reports ready through the shared /run/nvidia.
    pod = agent_pod(
        name="driver", namespace=namespace, node=node, program="driver", env={"DRIVER_VERSION": "570.124.06"}
    )
    pod["spec"]["volumes"] = [{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia", "type": "DirectoryOrCreate"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "run-nvidia", "mountPath": "/run/nvidia"}]
    client.create(codecs.from_dict(pod))
    ready = host / "run/nvidia/validations/.driver-ctr-ready"
    wait_for(ready.exists, timeout=30, describe=".driver-ctr-ready")
    assert simulator.node(node).gpu.driver_version() == "570.124.06"
