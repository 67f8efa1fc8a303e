"""NVIDIA's vGPU manager, one DaemonSet per OS of the GPU nodes, as the driver.

NVIDIA's operator renders one vGPU manager DaemonSet tagged with the OS of whichever GPU node its
cache lists first: on a cluster with two OSes the template flips between passes and some nodes run
another OS's image. Here an OS-tagged image (``repository/image:version-<osTag>``) gets one DaemonSet
per OS tag, ``nvidia-vgpu-manager-daemonset-<osTag>``, with that OS's labels in its node selector and
``nvidia.com/node.os-version``; an image that serves every OS keeps the single DaemonSet.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.names.keys import (
    NFD_NVIDIA_PCI,
    NODE_OS_VERSION,
    OPERAND_STATE,
    OS_ID,
    OS_VERSION,
    OS_VERSION_MAJOR,
)
from gpu_operator.render import OperatorSettings, StateManifests, render
from gpu_operator.render.facts import ClusterFacts, NodeInfo, facts_from_nodes
from tests.golden.test_nvidia_sandbox_contracts import AGENT, NV, SANDBOX

STATE = "state-vgpu-manager"
NAME = "nvidia-vgpu-manager-daemonset"
DEPLOY = {"nvidia.com/gpu.deploy.vgpu-manager": "true"}
IMAGE = f"{NV}/vgpu/vgpu-manager:580.95.02"
UBUNTU = {OS_ID: "ubuntu", OS_VERSION: "22.04"}
RHEL = {OS_ID: "rhel", OS_VERSION: "9.4", OS_VERSION_MAJOR: "9"}
RHEL_SELECTOR = {OS_ID: "rhel", OS_VERSION_MAJOR: "9"}  # rhel images are tagged by major version
DIGEST = "sha256:" + "ab" * 32


def _node(name: str, os_labels: dict[str, str], created: str) -> NodeInfo:
    return NodeInfo(name=name, labels={NFD_NVIDIA_PCI: "true", **os_labels}, creation=created)


#: The oldest GPU node runs Ubuntu: NVIDIA's operator would tag its one DaemonSet ubuntu22.04.
MIXED = facts_from_nodes(
    [_node("gpu-b", RHEL, "2025-01-02T00:00:00Z"), _node("gpu-a", UBUNTU, "2025-01-01T00:00:00Z")],
    namespace="gpu-operator",
)


def _state(spec: dict[str, Any], facts: ClusterFacts, **settings: Any) -> StateManifests:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    states = render(policy, facts, operator=OperatorSettings(agent_image=AGENT, **settings))
    (state,) = [s for s in states if s.name == STATE]
    return state


def _daemonsets(state: StateManifests) -> list[dict[str, Any]]:
    return [dict(o) for o in state.objects if o["kind"] == "DaemonSet"]


def _main_image(ds: dict[str, Any]) -> str:
    (main,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "nvidia-vgpu-manager-ctr"]
    return str(main["image"])


def _with(**vgpu: Any) -> dict[str, Any]:
    section = {k: v for k, v in SANDBOX["vgpuManager"].items() if k not in ("repository", "version")}
    return {**SANDBOX, "vgpuManager": {**section, **vgpu}}


def test_two_oses_get_one_daemonset_each() -> None:
    state = _state(SANDBOX, MIXED)
    rhel, ubuntu = _daemonsets(state)  # sorted by OS tag
    assert state.daemonsets == (f"{NAME}-rhel9", f"{NAME}-ubuntu22.04")  # the state's readiness covers both
    for ds, tag, selector in ((rhel, "rhel9", RHEL_SELECTOR), (ubuntu, "ubuntu22.04", UBUNTU)):
        name = f"{NAME}-{tag}"
        assert ds["metadata"]["name"] == name
        assert ds["metadata"]["labels"][NODE_OS_VERSION] == tag
        assert ds["metadata"]["labels"][OPERAND_STATE] == STATE  # what pruning finds it by
        template = ds["spec"]["template"]
        assert template["metadata"]["labels"][NODE_OS_VERSION] == tag
        assert ds["spec"]["selector"] == {"matchLabels": {"app": name}}
        assert template["spec"]["nodeSelector"] == {**DEPLOY, **selector}
        assert _main_image(ds) == f"{IMAGE}-{tag}"
        manager = template["spec"]["initContainers"][0]
        assert manager["image"] == "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.9.1"  # not tagged by OS
    # Apart from the node selector and the image's tag, the two pods are the same.
    assert _pod_without_os(rhel) == _pod_without_os(ubuntu)


def _pod_without_os(ds: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(ds["spec"]["template"]["spec"])
    del pod["nodeSelector"]
    for c in pod["containers"]:
        c["image"] = c["image"].rsplit("-", 1)[0]
    return dict(pod)


def test_the_order_the_nodes_come_in_does_not_matter() -> None:
    reversed_facts = ClusterFacts(
        namespace="gpu-operator", gpu_node_count=2, os_tag="rhel9",
        os_pools={"ubuntu22.04": UBUNTU, "rhel9": RHEL_SELECTOR},
    )  # fmt: skip
    assert _daemonsets(_state(SANDBOX, reversed_facts)) == _daemonsets(_state(SANDBOX, MIXED))


def test_one_os_gets_one_daemonset_named_after_it() -> None:
    facts = facts_from_nodes([_node("gpu-b", RHEL, "2025-01-02T00:00:00Z")], namespace="gpu-operator")
    (ds,) = _daemonsets(_state(SANDBOX, facts))
    assert ds["metadata"]["name"] == f"{NAME}-rhel9"
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {**DEPLOY, **RHEL_SELECTOR}
    assert _main_image(ds) == f"{IMAGE}-rhel9"


@pytest.mark.parametrize(
    ("spec", "settings", "image"),
    [
        (_with(repository=f"{NV}/vgpu", version=DIGEST), {}, f"{NV}/vgpu/vgpu-manager@{DIGEST}"),
        (_with(image="reg.local/vgpu-manager:580.95.02"), {}, "reg.local/vgpu-manager:580.95.02"),
        (_with(image=None), {"image_env": {"VGPU_MANAGER_IMAGE": "olm/vgpu@sha256:01"}}, "olm/vgpu@sha256:01"),
    ],
    ids=["digest", "full-reference", "operator-env"],
)
def test_an_image_for_every_os_keeps_one_daemonset(spec: dict[str, Any], settings: dict[str, Any], image: str) -> None:
    for facts in (MIXED, ClusterFacts(namespace="gpu-operator")):  # with two OSes, and with none known
        (ds,) = _daemonsets(_state(spec, facts, **settings))
        assert ds["metadata"]["name"] == NAME
        assert NODE_OS_VERSION not in ds["metadata"].get("labels", {})
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == DEPLOY
        assert _main_image(ds) == image


def test_no_node_os_means_a_note_and_no_daemonset() -> None:
    state = _state(SANDBOX, ClusterFacts(namespace="gpu-operator", gpu_node_count=1))
    assert _daemonsets(state) == []
    assert [o["kind"] for o in state.objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    assert "the vGPU manager image is tagged per OS and no GPU node reports its OS yet; no DaemonSet" in state.notes


def test_each_note_and_missing_reference_is_reported_once_for_all_pools() -> None:
    spec = {**SANDBOX, "vgpuManager": {**SANDBOX["vgpuManager"], "kernelModuleConfig": {"name": "vgpu-kmod"}}}
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, os_tag="ubuntu22.04",
                         os_pools={"ubuntu22.04": UBUNTU, "rhel9": RHEL_SELECTOR}, configmaps=frozenset(),
                         secrets=frozenset())  # fmt: skip
    state = _state(spec, facts)
    assert len(_daemonsets(state)) == 2
    assert [m.name for m in state.missing] == ["vgpu-kmod"]
    assert len(state.notes) == len(set(state.notes))
    assert any("spec.vgpuManager.driverManager" in n for n in state.notes)  # the manager's choice, noted once
