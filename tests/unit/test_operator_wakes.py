"""CPU per pass without changing what a pass does, continued (``test_operator_cpu``): a DaemonSet's changes
wake the upgrade controller only when it reads them, and node label changes are reused for a node whose
labels are the very mapping the last pass saw, under an equal spec."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.kube import facts as kube_facts
from gpu_operator.reconcile import nodelabels
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.nodelabels import label_changes, label_changes_of
from gpu_operator.render import node_info
from gpu_operator.upgrade import collect

JSON = dict[str, Any]
NS = "gpu-operator"
IMAGE = "nvcr.io/nvidia/driver:580.82.07"
GPU = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _daemonsets(woken: list[str]) -> Any:
    informers = operator_informers(
        None,
        namespace=NS,
        wake_all=lambda: woken.append("all"),
        wake_reconciler=lambda: woken.append("reconciler"),
        wake_upgrade=lambda: woken.append("up"),
    )
    return next(i for i in informers if i.kind == "DaemonSet")


def _ds(name: str, *, component: str, ready: int) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS, "uid": name, "labels": {"app.kubernetes.io/component": component}},
        "spec": {"template": {"spec": {"containers": [{"name": name, "image": f"{name}:1"}]}}},
        "status": {"numberReady": ready},
    }


def test_an_operand_daemonsets_status_wakes_the_reconciler_only() -> None:
    woken: list[str] = []
    daemonsets = _daemonsets(woken)
    daemonsets.apply("ADDED", _ds("nvidia-dcgm-exporter", component="nvidia-dcgm-exporter", ready=0))
    assert sorted(woken) == ["reconciler", "up"]  # a DaemonSet appearing: the validator's is read by upgrades
    woken.clear()
    for ready in range(1, 4):  # a rollout's status updates
        daemonsets.apply("MODIFIED", _ds("nvidia-dcgm-exporter", component="nvidia-dcgm-exporter", ready=ready))
    assert woken == ["reconciler"] * 3
    woken.clear()
    daemonsets.apply("DELETED", _ds("nvidia-dcgm-exporter", component="nvidia-dcgm-exporter", ready=3))
    assert sorted(woken) == ["reconciler", "up"]


def test_a_driver_daemonsets_changes_wake_both_keys() -> None:
    woken: list[str] = []
    daemonsets = _daemonsets(woken)
    daemonsets.apply("ADDED", _ds("nvidia-driver-daemonset", component="nvidia-driver", ready=0))
    daemonsets.apply("MODIFIED", _ds("nvidia-driver-daemonset", component="nvidia-driver", ready=1))
    assert sorted(woken) == ["reconciler", "reconciler", "up", "up"]


SPECS = [ClusterPolicySpec(), ClusterPolicySpec.model_validate({"migManager": {"enabled": False}})]
LABELS = [
    {},
    dict(GPU),
    {**GPU, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "false"},
    {**GPU, "nvidia.com/gpu.deploy.operands": "false", "nvidia.com/gpu.deploy.driver": "true"},
    {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true"},
]


@pytest.mark.parametrize("spec", SPECS)
def test_the_batch_answers_as_label_changes(spec: ClusterPolicySpec) -> None:
    for _ in range(2):  # the second call is answered from what the first one saw
        assert label_changes_of(LABELS, spec=spec) == [label_changes(labels, spec=spec) for labels in LABELS]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per :func:`label_changes` computed (not answered from the memo)."""
    counted_calls: list[int] = []
    real = nodelabels.label_changes

    def counted(labels: Any, *, spec: ClusterPolicySpec) -> Any:
        counted_calls.append(1)
        return real(labels, spec=spec)

    monkeypatch.setattr(nodelabels, "label_changes", counted)
    return counted_calls


def test_changes_are_reused_only_for_the_same_mapping_under_an_equal_spec(calls: list[int]) -> None:
    real = label_changes
    nodes = [dict(GPU), dict(GPU)]
    first = label_changes_of(nodes, spec=ClusterPolicySpec())
    first[0]["mine"] = "x"  # callers get copies: the memo is not theirs to change
    assert len(calls) == 2
    assert label_changes_of(nodes, spec=ClusterPolicySpec()) == [real(n, spec=SPECS[0]) for n in nodes]
    assert len(calls) == 2  # an equal spec, the same mappings
    label_changes_of([nodes[0], dict(GPU)], spec=ClusterPolicySpec())
    assert len(calls) == 3  # a new mapping (the node changed), even with equal labels
    label_changes_of(nodes, spec=SPECS[1])
    assert len(calls) == 5  # another spec: everything again


class _Kube:
    """Lists from fixed objects, as the operator's informers answer (the same objects every pass)."""

    def __init__(self, objects: dict[str, list[JSON]]) -> None:
        self.objects = objects

    async def list_objects(self, api_version: str, kind: str, **_: Any) -> list[JSON]:
        return self.objects.get(kind, [])


def _driver_pod(node: str, *, revision: str = "r1", ready: str = "True") -> JSON:
    return {
        "metadata": {"name": f"driver-{node}", "namespace": NS, "uid": f"p-{node}",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"app.kubernetes.io/component": "nvidia-driver", "controller-revision-hash": revision},
                     "ownerReferences": [{"kind": "DaemonSet", "uid": "ds", "name": "driver", "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "driver", "image": f"{IMAGE}-ubuntu22.04"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
    }  # fmt: skip


def test_driver_pod_views_are_reused_for_the_same_pod_with_equal_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = collect.driver_view

    def counted(pod: JSON, **kwargs: Any) -> Any:
        calls.append(pod["metadata"]["name"])
        return real(pod, **kwargs)

    monkeypatch.setattr(collect, "driver_view", counted)
    ds = {"metadata": {"name": "driver", "uid": "ds"},
          "spec": {"template": {"spec": {"containers": [{"image": IMAGE}]}}}}  # fmt: skip
    revision: JSON = {"metadata": {"labels": {"controller-revision-hash": "r1"},
                             "ownerReferences": [{"uid": "ds", "controller": True}]}, "revision": 1}  # fmt: skip
    nodes: list[JSON] = [{"metadata": {"name": n, "labels": {}}} for n in ("a", "b")]
    pods = [_driver_pod("a"), _driver_pod("b")]
    kube = _Kube({"DaemonSet": [ds], "ControllerRevision": [revision], "Pod": pods, "Node": nodes})
    first = asyncio.run(collect.read_cluster(kube, namespace=NS))  # type: ignore[arg-type]
    again = asyncio.run(collect.read_cluster(kube, namespace=NS))  # type: ignore[arg-type]
    assert again.drivers == first.drivers
    assert sorted(calls) == ["driver-a", "driver-b"]
    assert first.drivers["a"][1].in_sync
    assert first.drivers["a"][1].ready
    pods[1] = _driver_pod("b", ready="False")  # the informer replaced a changed pod
    kube.objects["ControllerRevision"] = [{**revision, "metadata": {**revision["metadata"], "labels": {
        "controller-revision-hash": "r2"}}, "revision": 2}]  # fmt: skip
    third = asyncio.run(collect.read_cluster(kube, namespace=NS))  # type: ignore[arg-type]
    assert sorted(calls) == ["driver-a", "driver-a", "driver-b", "driver-b"]  # a new revision: every view again
    assert not third.drivers["a"][1].in_sync
    assert not third.drivers["b"][1].ready


def test_node_infos_are_reused_for_the_same_node_object(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = node_info

    def counted(node: JSON) -> Any:
        calls.append(node["metadata"]["name"])
        return real(node)

    monkeypatch.setattr(kube_facts, "node_info", counted)
    nodes: list[JSON] = [
        {
            "metadata": {"name": n, "labels": dict(GPU)},
            "status": {"nodeInfo": {"containerRuntimeVersion": "containerd://2"}},
        }
        for n in ("a", "b")
    ]
    first = kube_facts.node_infos(nodes)
    assert kube_facts.node_infos(nodes) == first == [real(n) for n in nodes]
    assert calls == ["a", "b"]
    nodes[1] = {**nodes[1], "metadata": {"name": "b", "labels": {}}}  # the informer replaced a changed node
    assert kube_facts.node_infos(nodes) == [first[0], real(nodes[1])]
    assert calls == ["a", "b", "b"]


def test_a_spec_change_that_no_label_reads_keeps_the_answers_one_that_does_redoes_them(calls: list[int]) -> None:
    real = label_changes
    nodes = [dict(GPU), {**GPU, "nvidia.com/mig.capable": "true"}]
    label_changes_of(nodes, spec=ClusterPolicySpec())
    assert len(calls) == 2
    exporter = ClusterPolicySpec.model_validate(
        {"dcgmExporter": {"repository": "nvcr.io/nvidia/k8s", "image": "dcgm-exporter", "version": "4.6.0"}}
    )
    label_changes_of(nodes, spec=exporter)
    assert len(calls) == 2  # the exporter's version is no label's input: every answer kept
    mig = ClusterPolicySpec.model_validate({"migManager": {"config": {"name": "custom", "default": ""}}})
    assert label_changes_of(nodes, spec=mig) == [real(n, spec=mig) for n in nodes]
    assert len(calls) == 4
    assert "nvidia.com/mig.config" not in label_changes_of(nodes, spec=mig)[1]
    assert label_changes_of(nodes, spec=exporter)[1]["nvidia.com/mig.config"] == "all-disabled"
