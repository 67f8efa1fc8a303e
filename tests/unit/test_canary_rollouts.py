"""The canary stage's pure machine (``upgrade.canary``): which nodes may start, gates, halt and rollback."""

from __future__ import annotations

import dataclasses
import json

from gpu_operator.upgrade import canary as c
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.canary import GateFacts, Rollout, Target, advance, driver_spec_digest
from gpu_operator.upgrade.model import CanaryKnobs, DriverPodView, Knobs, NodeView, Snapshot
from gpu_operator.upgrade.plan import plan

OLD_DRIVER = {"version": "570.124.06", "repository": "nvcr.io/nvidia", "image": "driver"}
NEW_DRIVER = {**OLD_DRIVER, "version": "580.65.06"}
OLD = Target(digest=driver_spec_digest(OLD_DRIVER), version="570.124.06", driver=json.dumps(OLD_DRIVER))
NEW = Target(digest=driver_spec_digest(NEW_DRIVER), version="580.65.06", driver=json.dumps(NEW_DRIVER))
NODES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
KNOBS = CanaryKnobs(count=1, soak_seconds=60)


def _node(name: str, *, on: Target, ds: Target, state: str = m.DONE, ready: bool = True, **extra: str) -> NodeView:
    """A node whose driver pod (created at 100) runs ``on`` while its DaemonSet renders ``ds``."""
    driver = DriverPodView(namespace="gpu-operator", name=f"driver-{name}", daemonset="nvidia-driver-daemonset",
                           in_sync=on == ds, ready=ready, spec_digest=ds.digest if on == ds else "",
                           version=on.version, target_version=ds.version, created=100)  # fmt: skip
    return NodeView(name=name, labels={m.STATE_LABEL: state}, annotations=dict(extra), driver=driver)


def _snapshot(*, now: float, ds: Target, on: dict[str, Target] | None = None, **states: str) -> Snapshot:
    on = on or {}
    nodes = []
    for name in NODES:
        running = on.get(name, OLD)
        state = states.get(name.replace("-", "_"), m.DONE if running == ds else m.REQUIRED)
        # Failed on the new driver pod: the upgrade (cordoned at 50) had replaced the old one.
        failure = {m.FAILURE_REASON: "driver pod restarted 3 times", m.WAIT_START: "50"} if state == m.FAILED else {}
        nodes.append(_node(name, on=running, ds=ds, state=state, ready=state != m.FAILED, **failure))
    return Snapshot(nodes=tuple(nodes), now=now)


GOOD = Rollout(good=OLD.digest, good_version=OLD.version, good_driver=OLD.driver)


def test_a_settled_cluster_keeps_its_driver_as_the_last_good_one() -> None:
    decision = advance(Rollout(), snapshot=_snapshot(now=10, ds=OLD), knobs=KNOBS, target=OLD, facts=GateFacts())
    assert decision.rollout.good == OLD.digest
    assert json.loads(decision.rollout.good_driver) == OLD_DRIVER
    assert decision.allowed is None
    assert not decision.events


def test_a_new_driver_goes_to_the_first_node_only_and_the_others_wait() -> None:
    snapshot = _snapshot(now=100, ds=NEW)
    decision = advance(GOOD, snapshot=snapshot, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert decision.rollout.phase == c.CANARY
    assert decision.rollout.canaries == ("gpu-a",)
    assert decision.events[0][0] == "DriverCanaryStarted"
    knobs = Knobs(auto_upgrade=True, max_parallel=0, max_unavailable=None, admit=decision.allowed,
                  admit_hold=decision.hold)  # fmt: skip
    planned = plan(snapshot, knobs)
    assert planned.started == ("gpu-a",)
    assert set(planned.blocked) == {"gpu-b", "gpu-c", "gpu-d"}
    assert all("canary stage" in why for why in planned.blocked.values())


def test_named_canaries_are_taken_instead_of_the_first() -> None:
    knobs = dataclasses.replace(KNOBS, names=("gpu-c", "gone"))
    decision = advance(GOOD, snapshot=_snapshot(now=1, ds=NEW), knobs=knobs, target=NEW, facts=GateFacts())
    assert decision.rollout.canaries == ("gpu-c",)


def test_a_failed_canary_halts_and_rolls_back_only_the_canary() -> None:
    rollout = dataclasses.replace(GOOD, phase=c.CANARY, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a",), since=100)  # fmt: skip
    snapshot = _snapshot(now=200, ds=NEW, on={"gpu-a": NEW}, gpu_a=m.FAILED)
    decision = advance(rollout, snapshot=snapshot, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert decision.rollout.phase == c.ROLLING_BACK
    assert "driver pod restarted 3 times" in decision.rollout.reason
    assert decision.allowed == frozenset({"gpu-a"})
    assert [e[0] for e in decision.events] == ["DriverRollingBack"]
    assert decision.events[0][2]
    # The reconciler renders the last good spec.driver while rolling back from this target.
    assert decision.rollout.rendered_driver(target=NEW.digest) == OLD_DRIVER
    assert decision.rollout.rendered_driver(target="another") is None
    # The DaemonSet renders the old driver again: only the canary is out of date, and only it may start.
    back = _snapshot(now=210, ds=OLD, on={"gpu-a": NEW}, gpu_a=m.FAILED)
    again = advance(decision.rollout, snapshot=back, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert again.rollout.phase == c.ROLLING_BACK
    knobs = Knobs(auto_upgrade=True, max_parallel=0, max_unavailable=None, admit=again.allowed, admit_hold=again.hold)
    steps = {s.node: s for s in plan(back, knobs).steps if s.after != m.DONE}
    assert set(steps) == {"gpu-a"}
    assert steps["gpu-a"].after == m.POD_RESTART
    assert steps["gpu-a"].delete_driver
    # Once every node runs the good driver again: rolled back, and it stays so while spec.driver is the same.
    done = advance(again.rollout, snapshot=_snapshot(now=300, ds=OLD), knobs=KNOBS, target=NEW, facts=GateFacts())
    assert done.rollout.phase == c.ROLLED_BACK
    assert done.events[0][0] == "DriverRolledBack"
    steady = advance(done.rollout, snapshot=_snapshot(now=400, ds=OLD), knobs=KNOBS, target=NEW, facts=GateFacts())
    assert steady.rollout.phase == c.ROLLED_BACK
    assert not steady.events
    assert steady.rollout.rendered_driver(target=NEW.digest) == OLD_DRIVER


def test_a_new_spec_after_a_rollback_starts_a_new_canary_stage() -> None:
    rolled = dataclasses.replace(GOOD, phase=c.ROLLED_BACK, target=NEW.digest, canaries=("gpu-a",), since=5)
    newer_driver = {**NEW_DRIVER, "version": "580.82.07"}
    newer = Target(digest=driver_spec_digest(newer_driver), version="580.82.07", driver=json.dumps(newer_driver))
    decision = advance(rolled, snapshot=_snapshot(now=500, ds=newer), knobs=KNOBS, target=newer, facts=GateFacts())
    assert decision.rollout.phase == c.CANARY
    assert decision.rollout.target == newer.digest
    assert decision.rollout.good == OLD.digest  # still the last driver every node ran


def test_without_auto_rollback_the_rollout_halts_until_asked_to_roll_back() -> None:
    knobs = dataclasses.replace(KNOBS, auto_rollback=False)
    rollout = dataclasses.replace(GOOD, phase=c.CANARY, target=NEW.digest, canaries=("gpu-a",), since=1)
    snapshot = _snapshot(now=50, ds=NEW, on={"gpu-a": NEW}, gpu_a=m.FAILED)
    halted = advance(rollout, snapshot=snapshot, knobs=knobs, target=NEW, facts=GateFacts())
    assert halted.rollout.phase == c.HALTED
    assert halted.allowed == frozenset()
    assert halted.rollout.rendered_driver(target=NEW.digest) is None  # nothing rolls back by itself
    asked = dataclasses.replace(halted.rollout, rollback_requested=True)
    back = advance(asked, snapshot=snapshot, knobs=knobs, target=NEW, facts=GateFacts())
    assert back.rollout.phase == c.ROLLING_BACK
    assert "gpu-operator upgrade rollback" in back.rollout.reason
    assert not back.rollout.rollback_requested


def _soaking(now: float, facts: GateFacts, knobs: CanaryKnobs = KNOBS) -> c.Decision:
    rollout = dataclasses.replace(GOOD, phase=c.SOAKING, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a",), since=1000)  # fmt: skip
    return advance(rollout, snapshot=_snapshot(now=now, ds=NEW, on={"gpu-a": NEW}), knobs=knobs, target=NEW,
                   facts=facts)  # fmt: skip


def test_canaries_on_the_new_driver_soak_then_the_rollout_proceeds_and_completes() -> None:
    rollout = dataclasses.replace(GOOD, phase=c.CANARY, target=NEW.digest, canaries=("gpu-a",), since=900)
    soak = advance(rollout, snapshot=_snapshot(now=1000, ds=NEW, on={"gpu-a": NEW}), knobs=KNOBS, target=NEW,
                   facts=GateFacts())  # fmt: skip
    assert soak.rollout.phase == c.SOAKING
    assert soak.rollout.since == 1000
    assert soak.allowed == frozenset({"gpu-a"})
    assert soak.wake_in == 60
    waiting = _soaking(1030, GateFacts(validators={"gpu-a": True}))
    assert waiting.rollout.phase == c.SOAKING
    assert "30 s left" in waiting.hold
    passed = _soaking(1060, GateFacts(validators={"gpu-a": True}, exporter={"gpu-a": True}))
    assert passed.rollout.phase == c.PROCEEDING
    assert passed.allowed is None
    assert passed.events[0][0] == "DriverCanaryPassed"
    everyone = dict.fromkeys(NODES, NEW)
    complete = advance(passed.rollout, snapshot=_snapshot(now=2000, ds=NEW, on=everyone), knobs=KNOBS, target=NEW,
                       facts=GateFacts())  # fmt: skip
    assert complete.rollout.phase == c.IDLE
    assert complete.rollout.good == NEW.digest
    assert json.loads(complete.rollout.good_driver) == NEW_DRIVER
    assert complete.events[0][0] == "DriverRolloutComplete"


def test_a_new_xid_on_a_canary_while_soaking_halts_the_rollout() -> None:
    decision = _soaking(1010, GateFacts(xids={"gpu-a": "GpuUnhealthy: GPU-1 unhealthy after XID 79"}))
    assert decision.rollout.phase == c.ROLLING_BACK
    assert "XID 79" in decision.rollout.reason
    ignored = _soaking(1010, GateFacts(xids={"gpu-a": "XID 79"}), dataclasses.replace(KNOBS, xid_gate=False))
    assert ignored.rollout.phase == c.SOAKING


def test_a_validator_or_driver_pod_no_longer_ready_halts_the_rollout() -> None:
    assert _soaking(1010, GateFacts(validators={"gpu-a": False})).rollout.phase == c.ROLLING_BACK
    rollout = dataclasses.replace(GOOD, phase=c.SOAKING, target=NEW.digest, canaries=("gpu-a",), since=1000)
    snapshot = Snapshot(nodes=(_node("gpu-a", on=NEW, ds=NEW, ready=False),), now=1010)
    decision = advance(rollout, snapshot=snapshot, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert decision.rollout.phase == c.ROLLING_BACK
    assert "no longer Ready" in decision.rollout.reason


def test_the_exporter_must_be_ready_when_the_soak_ends() -> None:
    assert _soaking(1030, GateFacts(exporter={"gpu-a": False})).rollout.phase == c.SOAKING  # may still start
    late = _soaking(1060, GateFacts(exporter={"gpu-a": False}))
    assert late.rollout.phase == c.ROLLING_BACK
    assert "exporter" in late.rollout.reason
    off = _soaking(1060, GateFacts(exporter={"gpu-a": False}), dataclasses.replace(KNOBS, exporter_gate=False))
    assert off.rollout.phase == c.PROCEEDING


def test_the_probe_job_must_succeed_on_every_canary() -> None:
    knobs = dataclasses.replace(KNOBS, probe={"image": "cuda-sample", "timeoutSeconds": 60})
    first = _soaking(1001, GateFacts(), knobs)
    assert first.probes == ("gpu-a",)  # the Job is created while soaking
    waiting = _soaking(1070, GateFacts(probes={"gpu-a": c.PROBE_RUNNING}), knobs)
    assert waiting.rollout.phase == c.SOAKING
    assert "probe Job" in waiting.hold
    failed = _soaking(1020, GateFacts(probes={"gpu-a": "failed: DeadlineExceeded"}), knobs)
    assert failed.rollout.phase == c.ROLLING_BACK
    assert "DeadlineExceeded" in failed.rollout.reason
    passed = _soaking(1070, GateFacts(probes={"gpu-a": c.PROBE_SUCCEEDED}), knobs)
    assert passed.rollout.phase == c.PROCEEDING


def test_a_canary_removed_during_the_soak_is_not_waited_for_but_losing_every_canary_halts() -> None:
    knobs = dataclasses.replace(KNOBS, probe={"image": "cuda-sample", "timeoutSeconds": 60})
    rollout = dataclasses.replace(GOOD, phase=c.SOAKING, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a", "gpu-b"), since=1000)  # fmt: skip
    on = {"gpu-a": NEW, "gpu-b": NEW}
    nodes = tuple(n for n in _snapshot(now=1070, ds=NEW, on=on).nodes if n.name != "gpu-b")  # gpu-b scaled away
    one_left = advance(rollout, snapshot=Snapshot(nodes=nodes, now=1070), knobs=knobs, target=NEW,
                       facts=GateFacts(probes={"gpu-a": c.PROBE_SUCCEEDED}))  # fmt: skip
    assert one_left.rollout.phase == c.PROCEEDING
    none_left = tuple(n for n in nodes if n.name != "gpu-a")
    gone = advance(rollout, snapshot=Snapshot(nodes=none_left, now=1070), knobs=knobs, target=NEW, facts=GateFacts())
    assert gone.rollout.phase == c.ROLLING_BACK
    assert "left the cluster" in gone.rollout.reason


def test_without_a_canary_stage_or_a_known_good_driver_every_node_may_start() -> None:
    snapshot = _snapshot(now=1, ds=NEW)
    assert advance(GOOD, snapshot=snapshot, knobs=None, target=NEW, facts=GateFacts()).allowed is None
    first = advance(Rollout(), snapshot=snapshot, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert first.allowed is None
    assert first.rollout.phase == c.IDLE


def test_the_rollout_survives_its_configmap_and_a_restart() -> None:
    rollout = dataclasses.replace(GOOD, phase=c.SOAKING, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a", "gpu-b"), since=1000.5, reason="x")  # fmt: skip
    assert Rollout.from_data(rollout.data()) == rollout
    assert Rollout.from_data({"phase": "bogus", "since": "soon"}) == Rollout()


def test_a_canary_that_does_not_get_there_in_time_halts_the_rollout() -> None:
    knobs = dataclasses.replace(KNOBS, timeout_seconds=120)
    rollout = dataclasses.replace(GOOD, phase=c.CANARY, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a",), since=900, started=1000)  # fmt: skip
    stuck = _node("gpu-a", on=NEW, ds=NEW, state=m.POD_RESTART, ready=False)
    assert stuck.driver is not None
    stuck = dataclasses.replace(stuck, driver=dataclasses.replace(stuck.driver, waiting_reason="ImagePullBackOff"))
    early = advance(rollout, snapshot=Snapshot(nodes=(stuck,), now=1119), knobs=knobs, target=NEW, facts=GateFacts())
    assert early.rollout.phase == c.CANARY
    late = advance(rollout, snapshot=Snapshot(nodes=(stuck,), now=1120), knobs=knobs, target=NEW, facts=GateFacts())
    assert late.rollout.phase == c.ROLLING_BACK
    assert "within 120 s (pod-restart-required, driver pod ImagePullBackOff)" in late.rollout.reason


def test_the_canary_timeout_counts_from_when_the_canary_started_not_while_it_was_held() -> None:
    """A canary held in upgrade-required (a closed maintenance window, no free slot) is not late: the
    driver was never tried. Its timeout runs from the pass that sees it under way."""
    knobs = dataclasses.replace(KNOBS, timeout_seconds=120)
    rollout = dataclasses.replace(GOOD, phase=c.CANARY, target=NEW.digest, target_version=NEW.version,
                                  canaries=("gpu-a",), since=1000)  # fmt: skip
    held = _snapshot(now=5000, ds=NEW)  # hours later, still upgrade-required
    waiting = advance(rollout, snapshot=held, knobs=knobs, target=NEW, facts=GateFacts())
    assert (waiting.rollout.phase, waiting.rollout.started) == (c.CANARY, 0.0)
    assert waiting.allowed == frozenset({"gpu-a"})
    moving = _node("gpu-a", on=OLD, ds=NEW, state=m.CORDON)
    began = advance(rollout, snapshot=Snapshot(nodes=(moving,), now=6000), knobs=knobs, target=NEW, facts=GateFacts())
    assert (began.rollout.phase, began.rollout.started) == (c.CANARY, 6000)
    stuck = _node("gpu-a", on=NEW, ds=NEW, state=m.POD_RESTART, ready=False)
    snapshot = Snapshot(nodes=(stuck,), now=6119)
    on_time = advance(began.rollout, snapshot=snapshot, knobs=knobs, target=NEW, facts=GateFacts())
    assert on_time.rollout.phase == c.CANARY
    late = advance(began.rollout, snapshot=Snapshot(nodes=(stuck,), now=6120), knobs=knobs, target=NEW,
                   facts=GateFacts())  # fmt: skip
    assert late.rollout.phase == c.ROLLING_BACK
    assert Rollout.from_data(began.rollout.data()).started == 6000


def test_a_fixed_driver_after_a_halt_is_not_blamed_for_the_old_failure() -> None:
    """Without autoRollback a canary stays failed on B; spec.driver then goes to a fixed C. The failure on B
    must not halt C at once: healthy canaries are taken first, and the failed node waits for them."""
    fixed = {**NEW_DRIVER, "version": "580.65.07"}
    third = Target(digest=driver_spec_digest(fixed), version="580.65.07", driver=json.dumps(fixed))
    halted = dataclasses.replace(
        GOOD,
        phase=c.HALTED,
        target=NEW.digest,
        target_version=NEW.version,
        canaries=("gpu-a",),
        since=100,
        reason="canary gpu-a: driver pod restarted 3 times",
    )
    failed = _node(
        "gpu-a",
        on=NEW,
        ds=third,
        state=m.FAILED,
        ready=False,
        **{m.FAILURE_REASON: "driver pod restarted 3 times", m.WAIT_START: "150"},
    )
    assert failed.driver is not None
    failed = dataclasses.replace(failed, driver=dataclasses.replace(failed.driver, created=160))
    others = [_node(n, on=OLD, ds=third, state=m.DONE) for n in NODES[1:]]
    snapshot = Snapshot(nodes=(failed, *others), now=400)
    decision = advance(halted, snapshot=snapshot, knobs=KNOBS, target=third, facts=GateFacts())
    assert decision.rollout.phase == c.CANARY, decision.rollout.reason
    assert decision.rollout.canaries == ("gpu-b",)
    knobs = Knobs(auto_upgrade=True, max_parallel=0, max_unavailable=None, admit=decision.allowed,
                  admit_hold=decision.hold)  # fmt: skip
    planned = plan(snapshot, knobs)
    step = planned.step("gpu-a")
    assert step is not None
    assert step.after == m.FAILED  # not upgraded before its canaries passed
    assert "the changed driver comes later" in step.waiting
    # Named as the canary itself, the failed node is upgraded again, and its old failure halts nothing.
    named = advance(halted, snapshot=snapshot, knobs=dataclasses.replace(KNOBS, names=("gpu-a",)), target=third,
                    facts=GateFacts())  # fmt: skip
    assert named.rollout.phase == c.CANARY
    again = plan(snapshot, dataclasses.replace(knobs, admit=named.allowed, admit_hold=named.hold)).step("gpu-a")
    assert again is not None
    assert again.after not in (m.FAILED, "")


def test_a_driver_changed_while_proceeding_has_no_stale_good_driver_to_return_to() -> None:
    """B passed its canary and reached some nodes; spec.driver then goes to C. Rolling a C canary back to A
    would split the fleet (A here, B there) for good: C rolls without a canary stage, and becomes good."""
    fixed = {**NEW_DRIVER, "version": "580.65.07"}
    third = Target(digest=driver_spec_digest(fixed), version="580.65.07", driver=json.dumps(fixed))
    proceeding = dataclasses.replace(GOOD, phase=c.PROCEEDING, target=NEW.digest, target_version=NEW.version,
                                     canaries=("gpu-a",), since=100)  # fmt: skip
    mixed = _snapshot(now=200, ds=third, on={"gpu-a": NEW, "gpu-b": NEW})
    decision = advance(proceeding, snapshot=mixed, knobs=KNOBS, target=third, facts=GateFacts())
    assert (decision.rollout.phase, decision.rollout.good, decision.allowed) == (c.IDLE, "", None)
    done = advance(decision.rollout, snapshot=_snapshot(now=300, ds=third, on=dict.fromkeys(NODES, third)),
                   knobs=KNOBS, target=third, facts=GateFacts())  # fmt: skip
    assert done.rollout.good == third.digest


def test_a_skipped_or_down_node_does_not_keep_a_rollout_from_completing() -> None:
    proceeding = dataclasses.replace(GOOD, phase=c.PROCEEDING, target=NEW.digest, target_version=NEW.version,
                                     canaries=("gpu-a",), since=100)  # fmt: skip
    nodes = list(_snapshot(now=200, ds=NEW, on=dict.fromkeys(NODES[:2], NEW)).nodes)
    nodes[2] = dataclasses.replace(nodes[2], labels={**nodes[2].labels, m.SKIP_LABEL: "true"})
    nodes[3] = dataclasses.replace(nodes[3], ready=False)
    decision = advance(proceeding, snapshot=Snapshot(nodes=tuple(nodes), now=200), knobs=KNOBS, target=NEW,
                       facts=GateFacts())  # fmt: skip
    assert (decision.rollout.phase, decision.rollout.good) == (c.IDLE, NEW.digest)


def test_a_rollback_is_not_taken_once_the_canaries_passed() -> None:
    rollout = dataclasses.replace(GOOD, phase=c.PROCEEDING, target=NEW.digest, canaries=("gpu-a",), since=5,
                                  rollback_requested=True)  # fmt: skip
    snapshot = _snapshot(now=50, ds=NEW, on={"gpu-a": NEW, "gpu-b": NEW})
    decision = advance(rollout, snapshot=snapshot, knobs=KNOBS, target=NEW, facts=GateFacts())
    assert decision.rollout.phase == c.PROCEEDING
    assert decision.allowed is None
    # spec.driver back to the good one: every node goes back, no canary stage (it is the good driver).
    back = advance(decision.rollout, snapshot=_snapshot(now=60, ds=OLD, on={"gpu-a": NEW, "gpu-b": NEW}), knobs=KNOBS,
                   target=OLD, facts=GateFacts())  # fmt: skip
    assert back.rollout.phase == c.IDLE
    assert back.allowed is None
