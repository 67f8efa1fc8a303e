"""Network Operator observation: state readiness, policy status and conditions, MOFED wait labels, NNP conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.names import network as net
from gpu_operator.observe.network import (
    CONDITION_TYPES,
    AppliedState,
    condition_type,
    ignored_status,
    mofed_wait_labels,
    node_policy_conflicts,
    policy_status,
    state_result,
)
from gpu_operator.render.network import NetState

T0, T1 = "2026-08-01T00:00:00Z", "2026-08-01T00:05:00Z"


def ds(name: str, *, desired: int = 2, available: int = 2, updated: int = 2, generation: int = 1,
       observed: int = 1) -> dict[str, Any]:  # fmt: skip
    return {
        "kind": "DaemonSet",
        "metadata": {"name": name, "generation": generation},
        "status": {
            "desiredNumberScheduled": desired, "numberAvailable": available, "updatedNumberScheduled": updated,
            "observedGeneration": observed,
        },
    }  # fmt: skip


def rendered(name: str = net.STATE_MULTUS, *, daemonsets: tuple[str, ...] = ("d1",), deployments: tuple[str, ...] = (),
             extra: tuple[dict[str, Any], ...] = (), error: str = "") -> NetState:  # fmt: skip
    objs = [{"kind": "DaemonSet", "metadata": {"name": d}} for d in daemonsets]
    objs += [{"kind": "Deployment", "metadata": {"name": d}} for d in deployments]
    return NetState(name=name, enabled=True, objects=(*extra, *objs), daemonsets=daemonsets, deployments=deployments,
                    error=error)  # fmt: skip


# --- state_result ------------------------------------------------------------------------------------


def test_disabled_state_is_ignore_once_its_objects_are_gone() -> None:
    off = NetState(name=net.STATE_OFED, enabled=False)
    assert state_result(off, live={}) == AppliedState(net.STATE_OFED, net.IGNORE)
    left = state_result(off, live={("DaemonSet", "mofed-x-ds"): ds("mofed-x-ds")})
    assert left.state == net.NOT_READY
    assert "mofed-x-ds" in left.message


def test_ready_when_every_object_exists_and_every_daemonset_is_available_and_updated() -> None:
    sa = {"kind": "ServiceAccount", "metadata": {"name": "sa"}}
    st = rendered(extra=(sa,), deployments=("dep",))
    live = {("ServiceAccount", "sa"): sa, ("DaemonSet", "d1"): ds("d1"), ("Deployment", "dep"): {"status": {}}}
    assert state_result(st, live=live).state == net.READY


@pytest.mark.parametrize(
    ("live_ds", "words"),
    [
        (ds("d1", desired=0, available=0, updated=0), "no node selected"),
        (ds("d1", available=1), "1 of 2 pods available"),
        (ds("d1", updated=1), "1 of 2 pods updated"),
        (ds("d1", generation=2, observed=1), "not seen the latest spec"),
    ],
)
def test_daemonset_not_ready_rules(live_ds: dict[str, Any], words: str) -> None:
    result = state_result(rendered(), live={("DaemonSet", "d1"): live_ds})
    assert result.state == net.NOT_READY
    assert words in result.message


def test_missing_objects_are_named() -> None:
    result = state_result(rendered(deployments=("dep",)), live={("DaemonSet", "d1"): ds("d1")})
    assert result.state == net.NOT_READY
    assert "Deployment dep not created yet" in result.message


def test_deployments_only_have_to_exist() -> None:
    st = rendered(daemonsets=(), deployments=("dep",))
    assert state_result(st, live={("Deployment", "dep"): {"status": {"availableReplicas": 0}}}).state == net.READY


def test_render_error_is_error_and_ofed_without_pools_is_not_ready() -> None:
    assert state_result(rendered(error="boom"), live={}).state == net.ERROR
    empty = NetState(name=net.STATE_OFED, enabled=True, notes=("NIC nodes without NFD labels: n1",))
    result = state_result(empty, live={})
    assert result.state == net.NOT_READY
    assert "no node" in result.message
    assert "n1" in result.message


# --- policy status -----------------------------------------------------------------------------------


def test_condition_type_covers_every_state_with_upstream_names() -> None:
    assert set(CONDITION_TYPES) == set(net.STATES)
    assert condition_type(net.STATE_OFED) == "OFEDDriverReady"
    assert condition_type(net.STATE_MULTUS) == "MultusCNIReady"
    assert condition_type("state-unknown") is None


def test_status_ready_when_all_ready_or_ignored() -> None:
    results = [AppliedState(net.STATE_MULTUS, net.READY), AppliedState(net.STATE_OFED, net.IGNORE)]
    status = policy_status(results, previous=[], now=T0, generation=3)
    assert status["state"] == net.READY
    assert "reason" not in status
    assert status["appliedStates"] == [
        {"name": net.STATE_MULTUS, "state": net.READY}, {"name": net.STATE_OFED, "state": net.IGNORE},
    ]  # fmt: skip
    types = [c["type"] for c in status["conditions"]]
    assert types == ["MultusCNIReady", "Ready"]  # an ignored (absent) component has no condition
    ready = status["conditions"][-1]
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "AllComponentsReady", 3)


def test_status_not_ready_and_error_reasons() -> None:
    results = [
        AppliedState(net.STATE_OFED, net.NOT_READY, "DaemonSet x: 0 of 2 pods available"),
        AppliedState(net.STATE_RDMA_DP, net.READY),
    ]
    status = policy_status(results, previous=[], now=T0)
    assert status["state"] == net.NOT_READY
    assert "state-OFED" in status["reason"]
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["OFEDDriverReady"]["reason"] == "ComponentNotReady"
    assert by_type["Ready"]["reason"] == "ComponentsNotReady"
    errored = policy_status([AppliedState(net.STATE_OFED, net.ERROR, "no such OS")], previous=[], now=T0)
    assert errored["state"] == net.NOT_READY  # upstream: never error at the top
    by_type = {c["type"]: c for c in errored["conditions"]}
    ofed = by_type["OFEDDriverReady"]
    assert (ofed["reason"], ofed["message"]) == ("ComponentError", "no such OS")
    assert by_type["Ready"]["reason"] == "ComponentError"


def test_last_transition_time_is_kept_while_the_status_is_unchanged() -> None:
    first = policy_status([AppliedState(net.STATE_MULTUS, net.NOT_READY, "x")], previous=[], now=T0)
    again = policy_status([AppliedState(net.STATE_MULTUS, net.NOT_READY, "y")], previous=first["conditions"], now=T1)
    assert all(c["lastTransitionTime"] == T0 for c in again["conditions"])
    flipped = policy_status([AppliedState(net.STATE_MULTUS, net.READY)], previous=again["conditions"], now=T1)
    assert all(c["lastTransitionTime"] == T1 for c in flipped["conditions"])


def test_ignored_status() -> None:
    assert ignored_status("only nic-cluster-policy is acted on") == {
        "state": net.IGNORE, "reason": "only nic-cluster-policy is acted on",
    }  # fmt: skip


# --- MOFED wait labels ---------------------------------------------------------------------------------


def node(name: str, *, nic: bool = True, wait: str | None = None) -> dict[str, Any]:
    labels = {net.NIC_PRESENT: "true"} if nic else {}
    if wait is not None:
        labels[net.MOFED_WAIT] = wait
    return {"metadata": {"name": name, "labels": labels}}


def pod(node_name: str | None, *, ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"mofed-{node_name}"}
    if deleting:
        meta["deletionTimestamp"] = T0
    statuses = [{"name": net.OFED_CONTAINER, "ready": ready}, {"name": "sidecar", "ready": True}]
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": {"containerStatuses": statuses}}


def test_wait_label_follows_the_ofed_container() -> None:
    nodes = [node("ready"), node("loading"), node("pending"), node("leaving", wait="false"), node("done", wait="false")]
    pods = [pod("ready", ready=True), pod("loading", ready=False), pod(None, ready=False),
            pod("leaving", ready=True, deleting=True), pod("done", ready=True)]  # fmt: skip
    # "pending" has no pod on it yet: it waits too (a pending pod has no node).
    assert mofed_wait_labels(nodes=nodes, ofed_pods=pods, ofed_configured=True) == {
        "ready": "false", "loading": "true", "pending": "true", "leaving": "true",
    }  # fmt: skip


def test_a_false_label_from_before_the_driver_was_managed_closes_until_its_pod_is_ready() -> None:
    # The operator ran without ofedDriver (NIC nodes "false"), then the section arrived: until each
    # node's OFED pod is Ready the plugins must stay away, so "false" turns "true" at once.
    nodes = [node("nic", wait="false"), node("cpu", nic=False)]
    assert mofed_wait_labels(nodes=nodes, ofed_pods=[], ofed_configured=True) == {"nic": "true"}
    nnp_only = mofed_wait_labels(nodes=[node("nnp-node", wait="false")], ofed_pods=[], ofed_configured=False,
                                 nnp_nodes={"nnp-node"})  # fmt: skip
    assert nnp_only == {"nnp-node": "true"}


def test_without_ofed_leftover_pods_wait_nic_nodes_go_and_others_lose_the_label() -> None:
    nodes = [node("leftover"), node("nic"), node("cpu", nic=False, wait="false"), node("cpu2", nic=False)]
    result = mofed_wait_labels(nodes=nodes, ofed_pods=[pod("leftover", ready=True)], ofed_configured=False)
    assert result == {"leftover": "true", "nic": "false", "cpu": None}


def test_node_policy_nodes_follow_their_pods_without_cluster_ofed() -> None:
    nodes = [node("nnp-node", wait="true"), node("other")]
    result = mofed_wait_labels(
        nodes=nodes, ofed_pods=[pod("nnp-node", ready=True)], ofed_configured=False, nnp_nodes={"nnp-node"}
    )
    assert result == {"nnp-node": "false", "other": "false"}


# --- NicNodePolicy conflicts -----------------------------------------------------------------------------


def nnp(name: str, created: str, selector: dict[str, str], **sections: Any) -> dict[str, Any]:
    meta = {"name": name, "creationTimestamp": created}
    return {"metadata": meta, "spec": {"nodeSelector": selector, **sections}}


def test_a_newer_overlapping_policy_is_rejected_naming_the_nodes() -> None:
    nodes = [
        {"metadata": {"name": "n1", "labels": {"rack": "a", "gpu": "yes"}}},
        {"metadata": {"name": "n2", "labels": {"rack": "a"}}},
        {"metadata": {"name": "n3", "labels": {"rack": "b", "gpu": "yes"}}},
    ]
    policies = [
        nnp("gpu-nodes", T1, {"gpu": "yes"}), nnp("rack-a", T0, {"rack": "a"}), nnp("rack-b", T0, {"rack": "b"}),
    ]  # fmt: skip
    conflicts = node_policy_conflicts(policies=policies, nodes=nodes, cluster_policy=None)
    assert list(conflicts) == ["gpu-nodes"]
    assert "n1" in conflicts["gpu-nodes"]
    assert "rack-a" in conflicts["gpu-nodes"]
    assert "n3" in conflicts["gpu-nodes"]
    assert "rack-b" in conflicts["gpu-nodes"]


def test_a_section_also_in_the_cluster_policy_is_rejected() -> None:
    ncp = {"metadata": {"name": net.NCP_NAME}, "spec": {"ofedDriver": {"image": "x"}, "nvIpam": {"image": "y"}}}
    policies = [
        nnp("ofed", T0, {"a": "1"}, ofedDriver={"image": "x"}),
        nnp("rdma", T0, {"b": "1"}, rdmaSharedDevicePlugin={"image": "r"}),
    ]
    conflicts = node_policy_conflicts(policies=policies, nodes=[], cluster_policy=ncp)
    assert list(conflicts) == ["ofed"]
    assert "ofedDriver" in conflicts["ofed"]
