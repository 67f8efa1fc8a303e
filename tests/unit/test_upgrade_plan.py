"""The pure upgrade planner: every state, every knob, and the slot arithmetic, table by table."""

from __future__ import annotations

import pytest

from gpu_operator.names.selectors import Selector, parse_selector
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Budget, NodeView
from gpu_operator.upgrade.plan import available_slots
from tests.unit.upgrade_builders import NOW, after, applied, driver, knobs, node, pod, run

# --- entering the machine -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "sync", "requested", "expected"),
    [
        (m.UNKNOWN, True, False, m.DONE),
        (m.UNKNOWN, False, False, m.REQUIRED),
        (m.DONE, True, False, ""),  # nothing to do: no step
        (m.DONE, False, False, m.REQUIRED),
        (m.DONE, True, True, m.REQUIRED),  # upgrade-requested annotation forces it
        ("node-maintenance-required", True, False, m.DONE),  # requestor-mode values start over
    ],
)
def test_idle_nodes(state: str, sync: bool, requested: bool, expected: str) -> None:
    annotations = {m.REQUESTED: "true"} if requested else {}
    p = run([node("a", state, sync=sync, annotations=annotations)], knobs())
    assert after(p, "a") == expected
    assert p.started == ()  # entering upgrade-required is one label write, nothing disruptive yet


def test_entering_required_records_an_administrators_cordon() -> None:
    p = run([node("a", m.DONE, unschedulable=True), node("b", m.DONE)], knobs())
    step_a, step_b = p.step("a"), p.step("b")
    assert step_a is not None
    assert step_b is not None
    assert step_a.annotations[m.INITIAL_UNSCHEDULABLE] == "true"
    assert m.INITIAL_UNSCHEDULABLE not in step_b.annotations
    assert step_a.unschedulable is None
    assert step_b.unschedulable is None


def test_orphan_driver_pod_needs_an_upgrade() -> None:
    p = run([node("a", m.DONE, drv=driver(sync=True, daemonset=""))], knobs())
    assert after(p, "a") == m.REQUIRED


# --- slots: maxParallelUpgrades and maxUnavailable -----------------------------------------------


def _fleet(required: int, *, busy: int = 0, unavailable: int = 0) -> list[NodeView]:
    nodes = [node(f"n{i:02d}", m.REQUIRED) for i in range(required)]
    nodes += [node(f"busy{i}", m.POD_RESTART, unschedulable=True, sync=True, drv=driver(sync=True, ready=False))
              for i in range(busy)]  # fmt: skip
    nodes += [node(f"down{i}", m.DONE, sync=True, ready=False) for i in range(unavailable)]
    return nodes


@pytest.mark.parametrize(
    ("required", "busy", "unavailable", "max_parallel", "max_unavailable", "slots"),
    [
        (5, 0, 0, 1, "100%", 1),
        (5, 0, 0, 3, "100%", 3),
        (5, 1, 0, 3, "100%", 2),  # one already in progress
        (5, 3, 0, 3, "100%", 0),
        (5, 0, 0, 0, "100%", 5),  # 0 = unlimited: every waiting node
        (5, 0, 0, 0, None, 5),  # no cap at all
        (10, 0, 0, 10, "25%", 3),  # 25 % of 10 = 2.5, rounded up
        (10, 0, 1, 10, "25%", 2),  # a NotReady node counts against maxUnavailable
        (10, 1, 1, 10, "25%", 1),  # so does a cordoned node mid-upgrade
        (10, 0, 4, 10, "25%", 0),  # 4 of 14 managed nodes down: at the cap, nothing starts
        (8, 0, 0, 10, 2, 2),  # an integer cap
        (8, 0, 0, 2, "50%", 2),  # maxParallel is the tighter limit
        (4, 0, 0, 4, "1%", 1),  # 1 % of 4 nodes rounds up to one node
        (4, 0, 0, 4, "0%", 0),
    ],
)
def test_slot_arithmetic(
    required: int, busy: int, unavailable: int, max_parallel: int, max_unavailable: object, slots: int
) -> None:
    nodes = _fleet(required, busy=busy, unavailable=unavailable)
    k = knobs(max_parallel=max_parallel, max_unavailable=max_unavailable)
    p = run(nodes, k)
    assert available_slots(p_snapshot(nodes), k) == slots == p.slots
    assert len(p.started) == slots
    assert list(p.started) == sorted(p.started)  # nodes start in name order: previews can rely on it
    for name in (n.name for n in nodes if n.state == m.REQUIRED and n.name not in p.started):
        assert "slot" in p.blocked[name]


def p_snapshot(nodes: list[NodeView]) -> m.Snapshot:
    return m.Snapshot(nodes=tuple(nodes), now=NOW)


def test_a_node_the_administrator_cordoned_starts_without_a_slot_and_stays_cordoned() -> None:
    cordoned = node("z", m.REQUIRED, unschedulable=True, annotations={m.INITIAL_UNSCHEDULABLE: "true"})
    nodes = [
        node("a", m.REQUIRED),
        cordoned,
        node("busy", m.POD_RESTART, sync=True, drv=driver(sync=True, ready=False)),
    ]
    p = run(nodes, knobs(max_parallel=1))
    assert p.started == ("z",)  # the slot is taken by "busy"; "z" is already unavailable
    assert p.blocked["a"]
    # ... and at the end of its upgrade it is left cordoned.
    done = node("z", m.VALIDATION, unschedulable=True, sync=True, annotations={m.INITIAL_UNSCHEDULABLE: "true"},
                drv=driver(sync=True, created=NOW - 10), validators=[pod("v", gpu=False, created=NOW - 5)])  # fmt: skip
    step = run([done], knobs()).step("z")
    assert step is not None
    assert step.after == m.DONE
    assert step.unschedulable is None
    assert step.annotations[m.INITIAL_UNSCHEDULABLE] is None


def test_an_administrators_cordon_while_waiting_is_recorded_before_the_controller_cordons() -> None:
    waiting = node("a", m.REQUIRED, unschedulable=True)  # cordoned after it entered upgrade-required
    step = run([waiting], knobs()).step("a")
    assert step is not None
    assert step.annotations[m.INITIAL_UNSCHEDULABLE] == "true"


def test_skip_label_keeps_the_node_waiting() -> None:
    p = run([node("a", m.REQUIRED, labels={m.SKIP_LABEL: "true"}), node("b", m.REQUIRED)], knobs(max_parallel=2))
    assert p.started == ("b",)
    assert "skip" in p.blocked["a"]


def test_policy_reverted_before_the_node_started() -> None:
    step = run([node("a", m.REQUIRED, sync=True)], knobs()).step("a")
    assert step is not None
    assert step.after == m.DONE
    assert step.unschedulable is None


# --- the happy path, one pass at a time ------------------------------------------------------------


def test_a_node_without_gpu_pods_goes_from_slot_to_driver_restart_in_one_pass() -> None:
    step = run([node("a", m.REQUIRED)], knobs()).step("a")
    assert step is not None
    assert [t[1] for t in step.transitions] == [m.CORDON, m.WAIT_FOR_JOBS, m.POD_DELETION, m.POD_RESTART]
    assert step.unschedulable is True
    assert step.labels[m.STATE_LABEL] == m.POD_RESTART
    assert step.delete_driver == "gpu-operator/driver-a"
    assert step.evict == ()


def test_gpu_pods_are_evicted_after_the_cordon_and_the_node_waits_for_them() -> None:
    pods = [pod("train"), pod("web", gpu=False), pod("ds", owner="DaemonSet")]
    step = run([node("a", m.REQUIRED, pods=pods)], knobs()).step("a")
    assert step is not None
    assert step.after == m.POD_DELETION
    assert step.unschedulable is True
    assert step.evict == ("work/train",)  # only GPU pods, never DaemonSet pods
    assert step.delete_driver is None
    assert m.DELETION_START in step.annotations


def test_pods_not_read_yet_stop_the_walk_before_anything_is_evicted_or_restarted() -> None:
    unread = node("a", m.CORDON)
    unread = type(unread)(**{**unread.__dict__, "pods_known": False})
    step = run([unread], knobs()).step("a")
    assert step is not None
    assert step.after == m.WAIT_FOR_JOBS
    assert step.delete_driver is None
    assert "reading" in step.waiting


@pytest.mark.parametrize(
    ("validation", "expected_after", "uncordon"),
    [(True, m.VALIDATION, None), (False, m.DONE, False)],
)
def test_ready_driver_goes_to_validation_or_straight_to_uncordon(
    validation: bool, expected_after: str, uncordon: bool | None
) -> None:
    n = node("a", m.POD_RESTART, unschedulable=True, drv=driver(sync=True))
    step = run([n], knobs(validation=validation)).step("a")
    assert step is not None
    assert step.after == expected_after
    assert step.unschedulable is uncordon


def test_validation_needs_a_validator_newer_than_the_driver() -> None:
    drv = driver(sync=True, created=NOW - 60)
    stale = node("a", m.VALIDATION, unschedulable=True, drv=drv, validators=[pod("v", gpu=False, created=NOW - 600)],
                 annotations={m.VALIDATION_START: str(int(NOW - 30))})  # fmt: skip
    waiting = run([stale], knobs()).step("a")
    assert waiting is not None
    assert waiting.after == m.VALIDATION
    assert waiting.restart == ("work/v",)  # re-run against the new driver
    terminating = node("a", m.VALIDATION, unschedulable=True, drv=drv,
                       validators=[pod("v", gpu=False, created=NOW - 600, terminating=True)])  # fmt: skip
    again = run([terminating], knobs()).step("a")
    assert again is not None
    assert again.restart == ()  # never twice
    fresh = node("a", m.VALIDATION, unschedulable=True, drv=drv, validators=[pod("v", gpu=False, created=NOW - 10)])
    step = run([fresh], knobs()).step("a")
    assert step is not None
    assert step.after == m.DONE
    assert step.unschedulable is False
    assert all(step.annotations.get(k, None) is None for k in m.TIMER_ANNOTATIONS)


def test_a_driver_changed_during_validation_restarts_at_once_still_cordoned() -> None:
    """A canary rolled back from a driver that fails validation: the node must not sit out the validation
    timeout (600 s) before its driver pod is replaced by the good one."""
    n = node("a", m.VALIDATION, unschedulable=True, drv=driver(sync=False),
             annotations={m.VALIDATION_START: str(int(NOW - 30))})  # fmt: skip
    step = run([n], knobs()).step("a")
    assert step is not None
    assert step.after == m.POD_RESTART
    assert step.delete_driver == "gpu-operator/nvidia-driver-x"
    assert step.unschedulable is None  # stays cordoned
    assert not step.failed


def test_a_validator_check_that_gave_up_fails_the_node_before_the_timeout() -> None:
    """The CUDA check exits after failing three times: a definite answer, not a wait of 600 s."""
    drv = driver(sync=True, created=NOW - 60)
    why = "cuda-validation exited 1: agent validator: cuda validation failed 3 times in a row, 5 s apart: no libcuda"
    gave_up = pod("v", gpu=False, created=NOW - 30, phase="Pending", ready=False, init_failure=why)
    n = node("a", m.VALIDATION, unschedulable=True, drv=drv, validators=[gave_up],
             annotations={m.VALIDATION_START: str(int(NOW - 30))})  # fmt: skip
    step = run([n], knobs()).step("a")
    assert step is not None
    assert step.failed
    assert step.after == m.FAILED
    assert step.annotations[m.FAILURE_REASON] == f"validator pod v failed on this driver: {why}"
    # A validator of the driver before (older than the driver pod) says nothing about this one: restarted.
    old = pod("v", gpu=False, created=NOW - 600, phase="Pending", ready=False, init_failure=why)
    stale = node("a", m.VALIDATION, unschedulable=True, drv=drv, validators=[old],
                 annotations={m.VALIDATION_START: str(int(NOW - 30))})  # fmt: skip
    waiting = run([stale], knobs()).step("a")
    assert waiting is not None
    assert not waiting.failed
    assert waiting.restart == ("work/v",)


def test_validation_timeout_fails_the_node() -> None:
    n = node("a", m.VALIDATION, unschedulable=True, drv=driver(sync=True),
             annotations={m.VALIDATION_START: str(int(NOW - 601))})  # fmt: skip
    step = run([n], knobs()).step("a")
    assert step is not None
    assert step.failed
    assert step.after == m.FAILED
    assert "validation" in str(step.annotations[m.FAILURE_REASON])


# --- waiting for jobs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "timeout", "started_ago", "expected"),
    [
        ("", 0, 0, m.POD_RESTART),  # no selector: nothing to wait for (and no GPU pods here)
        ("app=job", 0, 10**6, m.WAIT_FOR_JOBS),  # 0 = wait forever
        ("app=job", 60, 30, m.WAIT_FOR_JOBS),
        ("app=job", 60, 61, m.POD_DELETION),  # timed out: the job's pod is evicted with the rest
        ("app in (other)", 0, 0, m.POD_RESTART),  # the selector matches nothing on the node
    ],
)
def test_wait_for_completion(selector: str, timeout: int, started_ago: int, expected: str) -> None:
    job = pod("job-1", gpu=True, owner="Job", labels={"app": "job"})
    n = node("a", m.WAIT_FOR_JOBS, unschedulable=True, pods=[job],
             annotations={m.WAIT_START: str(int(NOW - started_ago))})  # fmt: skip
    p = run([n], knobs(wait_selector=selector, wait_timeout=timeout))
    if expected == m.POD_RESTART:  # the job pod is a GPU pod: without a wait it is evicted first
        assert after(p, "a") == m.POD_DELETION
    else:
        assert after(p, "a") == expected


# --- pod deletion and drain -------------------------------------------------------------------------


def test_a_budget_that_allows_no_disruption_is_named_while_waiting_and_fails_at_the_timeout() -> None:
    train = pod("train", labels={"app": "train"})
    budget = Budget(namespace="work", name="keep", selector=parse_selector("app=train", field="x") or Selector(),
                    disruptions_allowed=0)  # fmt: skip
    waiting = node("a", m.POD_DELETION, unschedulable=True, pods=[train],
                   annotations={m.DELETION_START: str(int(NOW - 100))})  # fmt: skip
    step = run([waiting], knobs(), budgets=[budget]).step("a")
    assert step is not None
    assert step.after == m.POD_DELETION
    assert step.evict == ("work/train",)  # asked again: the API answers 429 until the budget allows it
    assert "blocked by PodDisruptionBudget work/keep" in step.waiting
    late = node("a", m.POD_DELETION, unschedulable=True, pods=[train],
                annotations={m.DELETION_START: str(int(NOW - 301))})  # fmt: skip
    failed = run([late], knobs(), budgets=[budget]).step("a")
    assert failed is not None
    assert failed.after == m.FAILED
    drained = run([late], knobs(drain_enable=True), budgets=[budget]).step("a")
    assert drained is not None
    assert drained.after == m.DRAIN


@pytest.mark.parametrize(
    ("kwargs", "pod_kwargs", "expected"),
    [
        ({}, {"owner": ""}, m.FAILED),  # a bare pod is deleted only with force
        ({"deletion_force": True}, {"owner": ""}, m.POD_DELETION),
        ({}, {"empty_dir": True}, m.FAILED),
        ({"deletion_empty_dir": True}, {"empty_dir": True}, m.POD_DELETION),
        ({"drain_enable": True}, {"owner": ""}, m.FAILED),  # the drain refuses a bare pod too
        ({"drain_enable": True, "drain_force": True}, {"owner": ""}, m.DRAIN),
    ],
)
def test_pod_deletion_rules(kwargs: dict[str, object], pod_kwargs: dict[str, object], expected: str) -> None:
    n = node("a", m.POD_DELETION, unschedulable=True, pods=[pod("p", **pod_kwargs)])  # type: ignore[arg-type]
    step = run([n], knobs(**kwargs)).step("a")
    assert step is not None
    assert step.after == expected
    if expected == m.FAILED:
        assert step.failed
        assert step.evict == ()


def test_drain_skips_daemonsets_mirrors_the_skip_label_and_unselected_pods() -> None:
    pods = [
        pod("web", gpu=False, labels={"tier": "web"}),
        pod("db", gpu=False, labels={"tier": "db"}),
        pod("keep", gpu=False, labels={"tier": "web", m.DRAIN_SKIP_LABEL: "true"}),
        pod("agent", gpu=False, owner="DaemonSet", labels={"tier": "web"}),
        pod("static", gpu=False, owner="Node", mirror=True, labels={"tier": "web"}),
        pod("done", gpu=False, phase="Succeeded", labels={"tier": "web"}),
    ]
    n = node("a", m.DRAIN, unschedulable=True, pods=pods)
    step = run([n], knobs(drain_enable=True)).step("a")
    assert step is not None
    assert set(step.evict) == {"work/web", "work/db"}
    step = run([n], knobs(drain_enable=True, drain_selector="tier=web")).step("a")
    assert step is not None
    assert step.evict == ("work/web",)
    emptied = node("a", m.DRAIN, unschedulable=True, pods=[pods[2], pods[3]])
    assert after(run([emptied], knobs(drain_enable=True)), "a") == m.POD_RESTART
    assert after(run([node("a", m.DRAIN, unschedulable=True)], knobs()), "a") == m.POD_RESTART  # drain off


def test_drain_timeout_and_refusals_fail_the_node() -> None:
    late = node("a", m.DRAIN, unschedulable=True, pods=[pod("web", gpu=False)],
                annotations={m.DRAIN_START: str(int(NOW - 301))})  # fmt: skip
    assert after(run([late], knobs(drain_enable=True)), "a") == m.FAILED
    assert after(run([late], knobs(drain_enable=True, drain_timeout=0)), "a") == m.DRAIN  # 0 = forever
    bare = node("a", m.DRAIN, unschedulable=True, pods=[pod("bare", gpu=False, owner="")])
    assert after(run([bare], knobs(drain_enable=True)), "a") == m.FAILED
    assert after(run([bare], knobs(drain_enable=True, drain_force=True)), "a") == m.DRAIN


# --- driver restart, failure and recovery ---------------------------------------------------------


@pytest.mark.parametrize(
    ("drv_kwargs", "expected_after", "deletes"),
    [
        ({"sync": False}, m.POD_RESTART, True),
        ({"sync": False, "terminating": True}, m.POD_RESTART, False),
        ({"sync": True, "ready": False, "restarts": 3}, m.POD_RESTART, False),
        ({"sync": True, "ready": False, "restarts": 11, "waiting_reason": "CrashLoopBackOff"}, m.FAILED, False),
        ({"sync": True}, m.VALIDATION, False),
    ],
)
def test_pod_restart(drv_kwargs: dict[str, object], expected_after: str, deletes: bool) -> None:
    n = node("a", m.POD_RESTART, unschedulable=True, drv=driver(**drv_kwargs))  # type: ignore[arg-type]
    step = run([n], knobs()).step("a")
    assert step is not None
    assert step.after == expected_after
    assert (step.delete_driver is not None) is deletes
    if expected_after == m.FAILED:
        assert "CrashLoopBackOff" in step.waiting
        assert step.failed


def test_restart_threshold_is_a_knob() -> None:
    n = node("a", m.POD_RESTART, unschedulable=True, drv=driver(sync=True, ready=False, restarts=3))
    assert after(run([n], knobs(max_driver_restarts=2)), "a") == m.FAILED


@pytest.mark.parametrize(
    ("drv_kwargs", "admin", "expected", "uncordon"),
    [
        ({"sync": True}, False, m.DONE, False),  # recovered: uncordoned
        ({"sync": True}, True, m.DONE, None),  # recovered, but the administrator's cordon stays
        ({"sync": True, "ready": False}, False, m.FAILED, None),
    ],
)
def test_failed_nodes_recover_when_the_driver_is_healthy_and_validated(
    drv_kwargs: dict[str, object], admin: bool, expected: str, uncordon: bool | None
) -> None:
    notes = {m.FAILURE_REASON: "validation timed out", **({m.INITIAL_UNSCHEDULABLE: "true"} if admin else {})}
    validator = pod("v", gpu=False, created=NOW - 10)  # Running and Ready on this driver
    n = node("a", m.FAILED, unschedulable=True, drv=driver(**drv_kwargs, created=NOW - 60),  # type: ignore[arg-type]
             annotations=notes, validators=[validator])  # fmt: skip
    p = run([n], knobs())
    assert after(p, "a", default=m.FAILED) == expected
    step = p.step("a")
    assert step is not None
    assert step.unschedulable is uncordon


def test_a_node_that_failed_validation_stays_failed_while_its_validator_fails() -> None:
    """Its driver pod is Ready: that alone used to count as recovered, uncordoning a node whose validator
    had just failed on this very driver."""
    notes = {m.FAILURE_REASON: "validator pod v failed on this driver: cuda-validation exited 1"}
    failing = pod("v", gpu=False, created=NOW - 10, phase="Pending", ready=False,
                  init_failure="cuda-validation exited 1")  # fmt: skip
    n = node("a", m.FAILED, unschedulable=True, drv=driver(sync=True, created=NOW - 60), annotations=notes,
             validators=[failing])  # fmt: skip
    step = run([n], knobs()).step("a")
    assert after(run([n], knobs()), "a", default=m.FAILED) == m.FAILED
    assert step is None or (step.unschedulable is None and not step.restart)
    # A validator older than the ready driver pod is restarted to check it; without validation, Ready is enough.
    stale = node("a", m.FAILED, unschedulable=True, drv=driver(sync=True, created=NOW - 60), annotations=notes,
                 validators=[pod("v", gpu=False, created=NOW - 600)])  # fmt: skip
    restarting = run([stale], knobs()).step("a")
    assert restarting is not None
    assert restarting.restart == ("work/v",)
    assert after(run([stale], knobs()), "a", default=m.FAILED) == m.FAILED
    unvalidated = node("a", m.FAILED, unschedulable=True, drv=driver(sync=True), annotations=notes)
    assert after(run([unvalidated], knobs(validation=False)), "a", default=m.FAILED) == m.DONE


def test_a_failed_node_whose_driver_changed_since_is_upgraded_again_still_cordoned() -> None:
    notes = {m.FAILURE_REASON: "validation timed out", m.WAIT_START: str(NOW - 600)}
    n = node("a", m.FAILED, unschedulable=True, drv=driver(sync=False, created=NOW - 300), annotations=notes)
    step = run([n], knobs()).step("a")
    assert step is not None
    assert step.after == m.POD_RESTART
    assert step.delete_driver
    assert step.unschedulable is None  # stays cordoned
    assert step.annotations[m.FAILURE_REASON] is None
    terminating = node("a", m.FAILED, unschedulable=True, drv=driver(sync=False, terminating=True), annotations=notes)
    assert after(run([terminating], knobs()), "a", default=m.FAILED) == m.FAILED
    # Failed before its old driver pod was replaced (a drain that never finished): it stays failed.
    old = node("a", m.FAILED, unschedulable=True, drv=driver(sync=False, created=NOW - 900), annotations=notes)
    assert after(run([old], knobs()), "a", default=m.FAILED) == m.FAILED


def test_a_node_to_uncordon_whose_driver_changed_again_is_upgraded_again_without_an_uncordon() -> None:
    stale = node("a", m.UNCORDON, unschedulable=True, drv=driver(sync=False), pods=[pod("train")])
    step = run([stale], knobs()).step("a")
    assert step is not None
    assert [t[1] for t in step.transitions][:2] == [m.CORDON, m.WAIT_FOR_JOBS]
    assert step.unschedulable is not False  # never uncordoned in between
    current = node("b", m.UNCORDON, unschedulable=True, drv=driver(sync=True))
    done = run([current], knobs()).step("b")
    assert done is not None
    assert done.after == m.DONE
    assert done.unschedulable is False


def test_restart_only_fast_path_skips_eviction() -> None:
    n = node("a", m.REQUIRED, drv=driver(same_config=True, name="driver-a"), pods=[pod("train")])
    step = run([n], knobs()).step("a")
    assert step is not None
    assert [t[1] for t in step.transitions] == [m.POD_RESTART]
    assert step.unschedulable is True
    assert step.evict == ()
    assert step.delete_driver == "gpu-operator/driver-a"


# --- switched off, and restarts at any point ------------------------------------------------------


def test_auto_upgrade_off_removes_labels_and_only_our_own_cordon() -> None:
    ours = node("a", m.POD_DELETION, unschedulable=True, annotations={m.DELETION_START: "1"})
    admins = node("b", m.POD_DELETION, unschedulable=True, annotations={m.INITIAL_UNSCHEDULABLE: "true"})
    p = run([ours, admins, node("c", m.DONE, sync=True)], knobs(auto_upgrade=False))
    a, b, c = p.step("a"), p.step("b"), p.step("c")
    assert a is not None
    assert a.labels == {m.STATE_LABEL: None}
    assert a.unschedulable is False
    assert a.annotations[m.DELETION_START] is None
    assert a.annotations[m.UPGRADE_ENABLED] is None
    assert b is not None
    assert b.unschedulable is None
    assert c is not None
    assert c.labels == {m.STATE_LABEL: None}


def test_replanning_after_a_crash_never_repeats_a_disruptive_step() -> None:
    """Walk one node to upgrade-done; at every point, a second plan of the same cluster state (what a
    restarted operator sees) evicts nothing already evicted and never deletes the driver pod twice."""
    n = node("a", m.DONE, pods=[pod("train"), pod("web", gpu=False)])
    k = knobs()
    deleted = evicted = 0
    for _ in range(12):
        step = run([n], k).step("a")
        if step is None:
            break
        again = run([n], k).step("a")  # the same snapshot twice: deterministic
        assert again == step
        n = applied(n, step)
        replay = run([n], k).step("a")  # the pass after, had the operator restarted in between
        if replay is not None:
            assert replay.delete_driver is None or not step.delete_driver
            assert not set(replay.evict) & set(step.evict)
        deleted += bool(step.delete_driver)
        evicted += len(step.evict)
        if step.delete_driver:  # the DaemonSet replaces the pod with one from the new template
            n = type(n)(**{**n.__dict__, "driver": driver(sync=True, created=NOW + 1)})
            n = type(n)(**{**n.__dict__, "validators": (pod("v", gpu=False, created=NOW + 2),)})
    assert n.state == m.DONE
    assert not n.unschedulable
    assert (deleted, evicted) == (1, 1)
    assert not any(k in n.annotations for k in (*m.TIMER_ANNOTATIONS, m.INITIAL_UNSCHEDULABLE))


def test_a_requested_upgrade_restarts_an_in_sync_driver_pod_once() -> None:
    """The upgrade-requested annotation (remediation's GPU reset) reloads the driver even when it is in sync."""
    started = {m.REQUESTED: "true", m.WAIT_START: str(int(NOW - 60))}
    old_pod = node("a", m.POD_RESTART, unschedulable=True, drv=driver(sync=True, created=NOW - 3600),
                   annotations=started)  # fmt: skip
    step = run([old_pod], knobs()).step("a")
    assert step is not None
    assert step.delete_driver  # the pod from before the upgrade makes way: the driver reloads
    assert step.annotations.get(m.REQUESTED, "kept") == "kept"  # the request stays until the node is done
    new_pod = node("a", m.POD_RESTART, unschedulable=True, drv=driver(sync=True, created=NOW - 10),
                   annotations=started)  # fmt: skip
    after_restart = run([new_pod], knobs()).step("a")
    assert after_restart is not None
    assert not after_restart.delete_driver  # once: the new pod goes on to validation
    assert after_restart.after == m.VALIDATION
