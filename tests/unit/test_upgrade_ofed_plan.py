"""The pure side of OFED upgrades: keys, knobs from the Network Operator's policies, and plan() with them.

Also the interplay with the GPU driver's machine on one node: separate labels, and the last upgrade
out lifts the cordon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gpu_operator.names import keys, network
from gpu_operator.names.pods import PodView
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.drivers import OFED_SOURCE, ofed_pod_partition, ofed_version, source_for
from gpu_operator.upgrade.model import NodeView, Snapshot
from gpu_operator.upgrade.ofed import node_partition, ofed_knobs, policy_knobs
from gpu_operator.upgrade.plan import Plan, plan
from tests.unit.upgrade_builders import NOW, driver, knobs, node, pod

OFED = keys.upgrade_keys("ofed")
GPU = keys.GPU_UPGRADE
ON = {"autoUpgrade": True, "maxParallelUpgrades": 2, "drain": {"enable": True}}


def onode(
    name: str,
    state: str = "",
    *,
    sync: bool = False,
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pods: Sequence[PodView] = (),
    unschedulable: bool = False,
) -> NodeView:
    all_labels = {**(labels or {}), **({OFED.state: state} if state else {})}
    return NodeView(
        name=name,
        labels=all_labels,
        annotations={OFED.enabled: "true", **(annotations or {})},
        unschedulable=unschedulable,
        driver=driver(sync=sync, ready=ready, name=f"mofed-{name}"),
        pods=tuple(pods),
        keys=OFED,
    )


def run(nodes: Sequence[NodeView], policy: Mapping[str, object] = ON) -> Plan:
    return plan(Snapshot(nodes=tuple(nodes), now=NOW, keys=OFED), ofed_knobs(policy))


def test_ofed_keys_are_upstreams_spelling() -> None:
    assert OFED.state == "nvidia.com/ofed-driver-upgrade-state"
    assert OFED.skip == "nvidia.com/ofed-driver-upgrade.skip"
    assert OFED.drain_skip == "nvidia.com/ofed-driver-upgrade-drain.skip"
    assert OFED.safe_load == "nvidia.com/ofed-driver-upgrade.driver-wait-for-safe-load"
    assert OFED.initial_unschedulable == "nvidia.com/ofed-driver-upgrade.node-initial-state.unschedulable"
    assert OFED.wait_start == "nvidia.com/ofed-driver-upgrade-wait-for-pod-completion-start-time"
    assert OFED.event_reason == "OFEDDriverUpgrade"
    assert GPU.state == keys.UPGRADE_STATE == m.STATE_LABEL == "nvidia.com/gpu-driver-upgrade-state"
    assert GPU.event_reason == m.EVENT_REASON == "GPUDriverUpgrade"
    assert source_for("ofed") is OFED_SOURCE
    with pytest.raises(ValueError, match="gpu, ofed"):
        source_for("nic")


def test_knobs_follow_upstreams_translation_of_the_ofed_policy() -> None:
    k = ofed_knobs({"autoUpgrade": True, "drain": {"podSelector": "app=train", "timeoutSeconds": 60}})
    assert k.auto_upgrade
    assert k.max_parallel == 1
    assert k.max_unavailable is None
    assert not k.pod_deletion
    assert not k.validation
    assert k.drain_enable
    assert k.drain_timeout == 60
    assert k.drain_selector is not None
    assert k.drain_selector.text() == f"app=train,{OFED.drain_skip} notin (true)"
    assert not ofed_knobs(None).auto_upgrade
    assert not ofed_knobs({"autoUpgrade": False, "maxParallelUpgrades": 3}).auto_upgrade


def test_policies_name_their_partitions_and_a_bad_one_says_where() -> None:
    ncp = {
        "kind": network.NCP_KIND,
        "metadata": {"name": network.NCP_NAME},
        "spec": {"ofedDriver": {"upgradePolicy": ON}},
    }
    other = {"kind": network.NCP_KIND, "metadata": {"name": "second"}, "spec": {"ofedDriver": {"upgradePolicy": ON}}}
    bad = {"kind": network.NNP_KIND, "metadata": {"name": "pool-a"},
           "spec": {"ofedDriver": {"upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": -1}}}}  # fmt: skip
    out = policy_knobs(cluster_policies=[ncp, other], node_policies=[bad], max_driver_restarts=3)
    assert set(out) == {"", "pool-a"}  # only the NicClusterPolicy named nic-cluster-policy counts
    first = out[""]
    assert isinstance(first, m.Knobs)
    assert first.max_parallel == 2
    assert first.max_driver_restarts == 3
    assert isinstance(out["pool-a"], str)
    assert "NicNodePolicy pool-a ofedDriver.upgradePolicy" in out["pool-a"]


def test_a_node_without_its_ofed_pod_follows_the_node_policy_that_selects_it() -> None:
    pool = {"metadata": {"name": "pool-a"}, "spec": {"nodeSelector": {"pool": "a"}, "ofedDriver": {}}}
    partition = node_partition([pool])
    assert partition({"metadata": {"name": "n1", "labels": {"pool": "a"}}}) == "pool-a"
    assert partition({"metadata": {"name": "n2", "labels": {"pool": "b"}}}) == ""
    ds = {"metadata": {"labels": {network.DS_OWNER_LABEL: "pool-a"}}}
    assert ofed_pod_partition({"metadata": {}}, ds) == "pool-a"
    assert ofed_pod_partition({"metadata": {}}, None) == ""


def test_ofed_version_is_the_image_tag_without_os_and_arch() -> None:
    image = "nvcr.io/m/doca-driver:25.04-0.6.1.0-2-ubuntu22.04-amd64"
    pod_spec = {"spec": {"containers": [{"name": network.OFED_CONTAINER, "image": image}]}}
    assert ofed_version(pod_spec) == "25.04-0.6.1.0-2"
    assert ofed_version({"spec": {"containers": [{"name": "x", "image": "a:b"}]}}) == ""


def test_after_the_jobs_an_ofed_node_drains_without_a_pod_deletion_step() -> None:
    p = run([onode("a", m.CORDON, pods=[pod("web", gpu=False)])])
    step = p.step("a")
    assert step is not None
    assert [t[1] for t in step.transitions] == [m.WAIT_FOR_JOBS, m.DRAIN]
    assert step.evict == ("work/web",)
    assert step.labels == {OFED.state: m.DRAIN}
    assert OFED.drain_start in step.annotations
    assert OFED.deletion_start not in step.annotations


def test_the_drain_never_takes_a_pod_labelled_ofed_drain_skip() -> None:
    operator = pod("network-operator", gpu=False, ns="nvidia-network-operator", labels={OFED.drain_skip: "true"})
    p = run([onode("a", m.DRAIN, pods=[operator, pod("web", gpu=False)])])
    step = p.step("a")
    assert step is not None
    assert step.evict == ("work/web",)
    alone = run([onode("a", m.DRAIN, pods=[operator])]).step("a")
    assert alone is not None
    assert alone.after == m.POD_RESTART


def test_a_ready_ofed_pod_passes_without_a_validator() -> None:
    p = run([onode("a", m.POD_RESTART, sync=True, unschedulable=True)])
    step = p.step("a")
    assert step is not None
    assert step.after == m.DONE
    assert step.unschedulable is False
    # A node left in validation-required passes too: there is nothing to wait for.
    left = run([onode("b", m.VALIDATION, sync=True, unschedulable=True)]).step("b")
    assert left is not None
    assert left.after == m.DONE


def test_a_driver_waiting_for_a_safe_load_is_upgraded_and_then_released() -> None:
    waiting = {OFED.safe_load: "true"}
    first = run([onode("a", m.DONE, sync=True, annotations=waiting)]).step("a")
    assert first is not None
    assert first.after == m.REQUIRED
    assert "safe load" in first.transitions[0][2]
    restart = run([onode("a", m.POD_RESTART, sync=True, ready=False, annotations=waiting, unschedulable=True)])
    step = restart.step("a")
    assert step is not None
    assert step.annotations.get(OFED.safe_load, "absent") is None
    assert step.delete_driver is None  # the pod is in sync: it only waited


def test_ofed_steps_write_ofed_keys_only_and_leave_the_gpu_state_alone() -> None:
    gpu_state = {GPU.state: m.VALIDATION}
    p = run([onode(f"n{i}", labels=gpu_state) for i in range(3)])
    for step in p.steps:
        written = [*step.labels, *step.annotations]
        assert written
        assert all(k.startswith(OFED.prefix) for k in written)
    assert p.keys == OFED


def test_gpu_steps_leave_the_ofed_state_alone() -> None:
    ofed_state = {OFED.state: m.DRAIN}
    gpu = plan(Snapshot(nodes=tuple(node(f"g{i}", labels=ofed_state) for i in range(3)), now=NOW), knobs())
    assert gpu.steps
    for step in gpu.steps:
        assert all(k.startswith(GPU.prefix) for k in [*step.labels, *step.annotations])


def test_the_last_upgrade_out_lifts_the_cordon() -> None:
    # The GPU driver's upgrade cordoned the node (not the administrator): OFED starts without taking
    # that cordon for the administrator's, and does not lift it when it is done first.
    gpu_busy = {GPU.state: m.POD_RESTART}
    started = run([onode("a", m.DONE, labels=gpu_busy, unschedulable=True)]).step("a")
    assert started is not None
    assert OFED.initial_unschedulable not in started.annotations
    finished = run([onode("a", m.POD_RESTART, sync=True, labels=gpu_busy, unschedulable=True)]).step("a")
    assert finished is not None
    assert finished.after == m.DONE
    assert finished.unschedulable is None
    # Once the GPU driver's upgrade is about to uncordon too, OFED lifts its own cordon.
    gpu_leaving = {GPU.state: m.UNCORDON}
    last = run([onode("a", m.POD_RESTART, sync=True, labels=gpu_leaving, unschedulable=True)]).step("a")
    assert last is not None
    assert last.unschedulable is False
    # The administrator's cordon, recorded by the GPU upgrade, stays the administrator's.
    admin = {GPU.initial_unschedulable: "true"}
    kept = run([onode("a", m.DONE, labels=gpu_busy, annotations=admin, unschedulable=True)]).step("a")
    assert kept is not None
    assert kept.annotations.get(OFED.initial_unschedulable) == "true"


def test_a_snapshot_cannot_mix_drivers() -> None:
    gpu_view = NodeView(name="g", driver=driver(), keys=GPU)
    with pytest.raises(ValueError, match="another driver's upgrade keys"):
        Snapshot(nodes=(gpu_view,), keys=OFED)


def test_gpu_knobs_still_delete_gpu_pods_first() -> None:
    k = knobs()
    assert k.pod_deletion
    assert k.validation
