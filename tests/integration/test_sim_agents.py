"""The operator's real node agents (device plugin, feature discovery) run unchanged as programs on simulated
nodes: the device plugin registers ``nvidia.com/gpu`` with the simulated kubelet, GFD labels the Node."""

from __future__ import annotations

from typing import Any

from lightkube import Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node

from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.programs.agents import agent_registry
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]


def _agents_daemonset(namespace: str) -> JSON:
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    containers = [
        {
            "name": "device-plugin",
            "image": "gpu-operator:test",
            "command": ["gpu-operator", "agent", "device-plugin"],
            "env": [node_name],
        },
        {
            "name": "gfd",
            "image": "gpu-operator:test",
            "command": ["gpu-operator", "agent", "feature-discovery"],
            "env": [
                node_name,
                {"name": "GFD_LABEL_NODE", "value": "true"},
                {"name": "GFD_SLEEP_INTERVAL", "value": "5s"},
            ],
        },
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agents", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "agents"}},
            "template": {
                "metadata": {"labels": {"app": "agents"}},
                "spec": {
                    "nodeSelector": {
                        "feature.node.kubernetes.io/pci-10de.present": "true",
                        "gpu-operator.sim/node": "true",
                    },
                    "terminationGracePeriodSeconds": 5,
                    "containers": containers,
                },
            },
        },
    }


def test_real_agents_run_on_simulated_nodes(
    client: Client, namespace: str, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory
) -> None:
    names = sim_nodes("dgx-h100:1,pcie-l4:1,cpu-only:1")
    registry = agent_registry()
    for name in ("device-plugin", "feature-discovery"):
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)
    client.create(codecs.from_dict(_agents_daemonset(namespace)))

    def advertised() -> dict[str, tuple[str | None, str | None]] | None:
        found = {}
        for name in names:
            node = client.get(Node, name).to_dict()
            found[name] = (
                node["status"]["allocatable"].get("nvidia.com/gpu"),
                node["metadata"]["labels"].get("nvidia.com/gpu.product"),
            )
        return found if found[names[0]][0] and found[names[1]][1] else None

    found = wait_for(advertised, timeout=60, describe="GPUs advertised and labelled on the GPU nodes")
    assert found[names[0]] == ("8", "NVIDIA-H100-80GB-HBM3")
    assert found[names[1]][0] == "4"
    assert found[names[2]] == (None, None)  # the CPU node runs no agent
    ds = client.get(DaemonSet, "agents", namespace=namespace).to_dict()["status"]
    assert ds["desiredNumberScheduled"] == 2
