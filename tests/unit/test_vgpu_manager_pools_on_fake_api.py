"""NVIDIA's per-OS vGPU manager DaemonSets on the in-memory API: a pool that goes takes its DaemonSet along.

``converge`` deletes every object it owns, with a state label, that no enabled state renders any
more; these tests pin that the vGPU manager's per-OS DaemonSets are among them, as the driver's are.
"""

from __future__ import annotations

from typing import Any

from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.names import keys
from tests.golden.test_nvidia_sandbox_contracts import SANDBOX
from tests.unit.test_passes_on_fake_api import _daemonsets, _reconcile

VGPU = "nvidia-vgpu-manager-daemonset"
UBUNTU = {keys.OS_ID: "ubuntu", keys.OS_VERSION: "22.04"}
RHEL = {keys.OS_ID: "rhel", keys.OS_VERSION: "9.4", keys.OS_VERSION_MAJOR: "9"}


def _cluster(spec: dict[str, Any]) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": spec}, plural="clusterpolicies")  # fmt: skip
    for name, os_labels in (("gpu-1", UBUNTU), ("gpu-2", RHEL)):
        labels = {keys.NFD_NVIDIA_PCI: "true", "nvidia.com/gpu.workload.config": "vm-vgpu", **os_labels}
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                 "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, plural="nodes")  # fmt: skip
    return api


def _vgpu(api: FakeApi) -> set[str]:
    return {n for n in _daemonsets(api) if n.startswith(VGPU)}


def test_a_gone_os_pool_loses_its_vgpu_manager_daemonset() -> None:
    api = _cluster(SANDBOX)
    _reconcile(api)
    assert _vgpu(api) == {f"{VGPU}-rhel9", f"{VGPU}-ubuntu22.04"}
    node = api.get("v1", "nodes", "gpu-2")
    assert node is not None
    node["metadata"]["labels"] = {k: v for k, v in node["metadata"]["labels"].items() if k not in RHEL} | UBUNTU
    _reconcile(api)
    assert _vgpu(api) == {f"{VGPU}-ubuntu22.04"}  # the rhel9 DaemonSet was pruned


def _set_spec(api: FakeApi, spec: dict[str, Any]) -> None:
    policy = api.get("nvidia.com/v1", "clusterpolicies", "cluster-policy")  # as stored now (status patched)
    assert policy is not None
    policy["spec"] = spec


def test_an_image_for_every_os_replaces_the_per_os_daemonsets() -> None:
    api = _cluster(SANDBOX)
    _reconcile(api)
    _set_spec(api, {**SANDBOX, "vgpuManager": {**SANDBOX["vgpuManager"], "version": "sha256:" + "ab" * 32}})
    _reconcile(api)
    assert _vgpu(api) == {VGPU}
    _set_spec(api, SANDBOX)
    _reconcile(api)
    assert _vgpu(api) == {f"{VGPU}-rhel9", f"{VGPU}-ubuntu22.04"}  # and back
