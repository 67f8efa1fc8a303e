"""The operator's own count of the nodes a DaemonSet should run on, and the readiness rule it feeds:
a DaemonSet whose controller has scheduled fewer pods than that is not ready (upstream calls a
DaemonSet with nothing desired ready, even when its controller simply has not caught up)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.names.selectors import tolerates
from gpu_operator.observe.eligible import eligible_nodes
from gpu_operator.observe.readiness import daemonset_readiness

JSON = dict[str, Any]
SELECTOR = {"nvidia.com/gpu.deploy.driver": "true"}


def _node(name: str, *, labels: JSON | None = None, taints: list[JSON] | None = None) -> JSON:
    return {"metadata": {"name": name, "labels": {**SELECTOR, **(labels or {})}}, "spec": {"taints": taints or []}}


def _ds(*, template: JSON | None = None, desired: int = 0, available: int = 0) -> JSON:
    spec = {"nodeSelector": SELECTOR, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    status = {"desiredNumberScheduled": desired, "numberAvailable": available, "updatedNumberScheduled": available,
              "observedGeneration": 1}  # fmt: skip
    return {
        "metadata": {"name": "nvidia-driver-daemonset", "generation": 1},
        "spec": {"template": {"spec": {**spec, **(template or {})}}, "updateStrategy": {"type": "RollingUpdate"}},
        "status": status,
    }


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, True),
        ({"key": "a", "value": "x"}, {"key": "a", "value": "x", "effect": "NoExecute"}, True),
        ({"key": "a", "value": "y"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),
        ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
        ({"key": "b", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, False),
    ],
)
def test_the_kubernetes_toleration_rule(toleration: JSON, taint: JSON, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_eligible_nodes_match_the_selector_and_tolerate_the_taints() -> None:
    nodes = [
        _node("plain"),
        _node("gpu-tainted", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        _node("cordoned", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        _node("unreachable", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
        _node("prefer-only", taints=[{"key": "team", "value": "a", "effect": "PreferNoSchedule"}]),
        _node("dedicated", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        _node("not-ready", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
        _node("no-network", taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]),
        {"metadata": {"name": "cpu", "labels": {}}, "spec": {}},
        _node("opted-out", labels={"nvidia.com/gpu.deploy.driver": "false"}),
    ]
    assert eligible_nodes(_ds(), nodes) == 5
    assert eligible_nodes(_ds(template={"hostNetwork": True}), nodes) == 6
    assert eligible_nodes(_ds(template={"tolerations": [{"operator": "Exists"}]}), nodes) == 8
    assert eligible_nodes(_ds(template={"affinity": {"nodeAffinity": {}}}), nodes) is None


def test_a_daemonset_behind_the_operators_count_is_not_ready() -> None:
    early = daemonset_readiness(_ds(desired=0), eligible=900)
    assert not early.ready
    assert early.reason == "nvidia-driver-daemonset: the DaemonSet controller has scheduled 0 of 900 nodes so far"
    assert not daemonset_readiness(_ds(desired=450, available=450), eligible=900).ready
    assert daemonset_readiness(_ds(desired=900, available=900), eligible=900).ready
    assert daemonset_readiness(_ds(desired=0), eligible=0).ready  # no GPU node: nothing to wait for
    assert daemonset_readiness(_ds(desired=0), eligible=None).ready  # not counted: upstream's rule


def test_counts_follow_the_nodes_and_each_daemonsets_own_scheduling_fields() -> None:
    nodes = [_node("a"), _node("b"), _node("c", labels={"nvidia.com/gpu.deploy.driver": "false"})]
    driver = _ds()
    exporter = _ds(template={"nodeSelector": {"nvidia.com/gpu.deploy.driver": "false"}})
    assert eligible_nodes(driver, nodes) == 2
    assert eligible_nodes(exporter, nodes) == 1  # the same nodes, other fields: counted on their own
    assert eligible_nodes(driver, nodes) == 2
    # A node replaced by its informer (a new object) with a taint nothing tolerates: counted again.
    tainted = [nodes[0], _node("b", taints=[{"key": "x", "effect": "NoSchedule"}]), nodes[2]]
    assert eligible_nodes(driver, tainted) == 1
    assert eligible_nodes(exporter, tainted) == 1
    assert eligible_nodes(driver, tainted[:1]) == 1
    assert eligible_nodes(driver, [*nodes, _node("d")]) == 3
