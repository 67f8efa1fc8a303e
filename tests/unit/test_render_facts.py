"""Cluster facts from Nodes: GPU nodes, NFD, the OS tag of the oldest GPU node, runtime, kernels."""

from __future__ import annotations

import pytest

from gpu_operator.render import OperatorSettings, RenderError, facts_from_nodes, node_info
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE, NodeInfo, os_tag

NFD = "feature.node.kubernetes.io/"


def node(
    name: str,
    *,
    gpu: bool | None = True,
    os: str = "ubuntu",
    version: str = "22.04",
    kernel: str = "5.15.0-1",
    runtime: str = "containerd://2.1",
    created: str = "2026-01-01T00:00:00Z",
) -> NodeInfo:
    labels = {
        f"{NFD}system-os_release.ID": os,
        f"{NFD}system-os_release.VERSION_ID": version,
        f"{NFD}kernel-version.full": kernel,
    }
    if gpu is not None:
        labels["nvidia.com/gpu.present"] = str(gpu).lower()
    return NodeInfo(name=name, labels=labels, runtime_version=runtime, creation=created)


def test_node_info_reads_a_node_object() -> None:
    info = node_info(
        {
            "metadata": {"name": "n", "labels": {f"{NFD}pci-10de.present": "true"}, "creationTimestamp": "t"},
            "status": {"nodeInfo": {"containerRuntimeVersion": "cri-o://1.30"}},
        }
    )
    assert (info.name, info.gpu, info.runtime_version, info.creation) == ("n", True, "cri-o://1.30", "t")


def test_gpu_present_label_wins_over_nfd() -> None:
    labels = {f"{NFD}pci-10de.present": "true", "nvidia.com/gpu.present": "false"}
    assert not NodeInfo(name="n", labels=labels).gpu


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"ID": "ubuntu", "VERSION_ID": "24.04"}, "ubuntu24.04"),
        ({"ID": "rhel", "VERSION_ID": "9.4", "VERSION_ID.major": "9"}, "rhel9"),
        ({"ID": "rocky", "VERSION_ID": "8.10"}, "rocky8"),
        ({"ID": "ubuntu"}, None),
        ({}, None),
    ],
)
def test_os_tag(labels: dict[str, str], expected: str | None) -> None:
    assert os_tag({f"{NFD}system-os_release.{k}": v for k, v in labels.items()}) == expected


def test_facts_count_gpu_nodes_and_take_the_oldest_gpu_nodes_os() -> None:
    nodes = [
        node("b", os="rhel", version="9.4", created="2026-02-01T00:00:00Z"),
        node("a", created="2026-01-01T00:00:00Z"),
        node("cpu", gpu=False, os="debian", version="12", created="2025-01-01T00:00:00Z"),
    ]
    facts = facts_from_nodes(nodes, namespace="ns", has_service_monitor_crd=True, configmaps=["x"])
    assert facts.gpu_node_count == 2
    assert facts.os_tag == "ubuntu22.04"
    assert facts.has_nfd_labels
    assert facts.has_service_monitor_crd
    assert facts.configmaps == frozenset({"x"})
    assert facts.secrets is None


def test_no_nfd_labels_anywhere() -> None:
    facts = facts_from_nodes([NodeInfo(name="n", labels={"nvidia.com/gpu.present": "true"})], namespace="ns")
    assert not facts.has_nfd_labels
    assert facts.os_tag is None


@pytest.mark.parametrize(
    ("runtimes", "expected"),
    [
        (["docker://24", "containerd://2"], "containerd"),
        (["cri-o://1.30"], "crio"),
        (["docker://24"], "docker"),
        ([], "containerd"),
    ],
)
def test_runtime_detection(runtimes: list[str], expected: str) -> None:
    nodes = [node(f"n{i}", runtime=r) for i, r in enumerate(runtimes)]
    assert facts_from_nodes(nodes, namespace="ns").runtime == expected


def test_kernel_map_and_the_precompiled_conflict() -> None:
    nodes = [node("a", kernel="5.15.0-100"), node("b", os="rhel", version="9.4", kernel="5.15.0-100")]
    assert dict(facts_from_nodes(nodes[:1], namespace="ns").kernel_os) == {"5.15.0-100": "ubuntu22.04"}
    facts_from_nodes(nodes, namespace="ns")  # not precompiled: no error
    with pytest.raises(RenderError, match=r"kernel 5\.15\.0-100 runs on two operating systems"):
        facts_from_nodes(nodes, namespace="ns", precompiled=True)


def test_operator_settings_from_env() -> None:
    settings = OperatorSettings.from_env({"DRIVER_IMAGE": "d@sha256:1", "UNRELATED_IMAGE": "x", "VALIDATOR_IMAGE": ""})
    assert settings.agent_image == DEFAULT_AGENT_IMAGE
    assert dict(settings.image_env) == {"DRIVER_IMAGE": "d@sha256:1"}
    assert OperatorSettings.from_env({"AGENT_IMAGE": "mine:1"}).agent_image == "mine:1"


def test_configmap_keys_are_sorted_and_name_the_configmaps() -> None:
    nodes = [node("a")]
    facts = facts_from_nodes(nodes, namespace="ns", configmap_keys={"b": ["z", "a"], "a": []})
    assert facts.configmap_keys == {"a": (), "b": ("a", "z")}
    assert list(facts.configmap_keys or {}) == ["a", "b"]
    assert facts.configmaps == frozenset({"a", "b"})  # given alone, the keys name the ConfigMaps
    offline = facts_from_nodes(nodes, namespace="ns", configmaps=["x"])
    assert offline.configmap_keys is None  # not looked up: the renderer falls back (render.nvidia.drivermounts)
    assert offline.configmaps == frozenset({"x"})
