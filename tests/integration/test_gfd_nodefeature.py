"""GFD's NodeFeature output on the real API server: one NFD NodeFeature per GPU node, no node labels."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Node

from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.programs.agents import agent_registry
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

NodeFeature = create_namespaced_resource("nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures")
# A stand-in for NFD's own CRD: enough for the API server to store NodeFeature objects.
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io"},
    "spec": {
        "group": "nfd.k8s-sigs.io",
        "names": {
            "kind": "NodeFeature",
            "listKind": "NodeFeatureList",
            "plural": "nodefeatures",
            "singular": "nodefeature",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


@pytest.fixture
def nodefeature_crd(client: Client) -> Iterator[None]:
    install_crds(client=client, manifests={"nodefeature.yaml": CRD})
    try:
        yield
    finally:  # other tests decide GFD's output by this CRD's presence
        client.delete(CustomResourceDefinition, CRD["metadata"]["name"])


def test_feature_discovery_writes_node_feature_objects(
    client: Client,
    namespace: str,
    nodefeature_crd: None,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    (node,) = sim_nodes("pcie-l4:1")
    spec = agent_registry().get("feature-discovery")
    assert spec is not None
    sim_program("feature-discovery", spec.entrypoint)
    container = {
        "name": "gfd",
        "image": "gpu-operator:test",
        "command": ["gpu-operator", "agent", "feature-discovery"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "GFD_USE_NODE_FEATURE_API", "value": "true"},
            {"name": "GFD_SLEEP_INTERVAL", "value": "2s"},
        ],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gfd", "namespace": namespace},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]},
    }
    client.create(codecs.from_dict(pod))

    def feature() -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = client.get(NodeFeature, f"nvidia-features-for-{node}", namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
        except Exception:
            return None
        return obj

    found = wait_for(feature, timeout=60, describe="the NodeFeature object")
    assert found["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": node}
    assert found["spec"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert found["spec"]["labels"]["nvidia.com/gpu.count"] == "4"
    labels = client.get(Node, node).metadata.labels or {}  # type: ignore[union-attr]
    assert "nvidia.com/gpu.product" not in labels  # NFD, not GFD, writes node labels in this mode
