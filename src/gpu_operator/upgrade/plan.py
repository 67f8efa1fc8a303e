"""The pure heart of driver upgrades: ``plan(snapshot, knobs) -> Plan``, every transition of one pass.

No I/O and no clock: the snapshot carries ``now``. For each managed node the planner walks the state
machine of upgrade-state-machine.md §4 from the node's label, as far as the snapshot allows in one
pass (cordoning and moving on needs nothing new from the cluster; waiting for pods to go does), and
returns a :class:`Step`: the node's new label, annotations and cordon (one atomic Node patch), the
pods to evict and the driver pod to delete. Slots (maxParallelUpgrades, maxUnavailable) are computed
once from the snapshot, as upstream does. The executor (``execute``) applies steps; the controller
runs the live loop; the preview (``preview``) runs this same function over a virtual cluster, so a
preview and the rollout it announces cannot disagree. Which driver's labels it reads and writes is the
snapshot's business (``Snapshot.keys``): the GPU driver and the Network Operator's OFED driver share
this one machine.

Crash safety comes from the shapes here: the node patch carries label, annotations and cordon together,
the administrator's cordon is recorded before the controller ever cordons, and every disruptive step
(evicting, deleting the driver pod) is visible on the cluster, so a repeated pass never repeats it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpu_operator.names.keys import UpgradeKeys
from gpu_operator.names.pods import PodView
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Knobs, NodeView, Snapshot
from gpu_operator.upgrade.steps import Step, Work, node_pods_to_drain, pods_to_delete, timer_starts, timers

#: No node walks more states than this in one pass (a guard: the machine has no cycles within a pass).
MAX_CHAIN = len(m.STATES)
#: How a node waiting for a maintenance window says so (the controller wakes when the next one opens).
WINDOW_CLOSED = "outside the maintenance windows"


@dataclass(frozen=True, kw_only=True)
class Plan:
    steps: tuple[Step, ...]
    slots: int  # how many idle nodes this pass could start
    started: tuple[str, ...]  # nodes that left upgrade-required in this pass
    blocked: Mapping[str, str]  # idle nodes that need an upgrade but did not start: why
    keys: UpgradeKeys = m.GPU  # the driver the steps are about (their Events' reason)
    window_opens: float | None = None  # a node waits for a maintenance window: when the next one opens

    def step(self, node: str) -> Step | None:
        return next((s for s in self.steps if s.node == node), None)


def needs_upgrade(node: NodeView) -> bool:
    driver = node.driver
    if driver is None:
        return False
    requested = node.annotations.get(node.keys.requested) == "true"
    return not driver.in_sync or driver.orphan or requested or node.waiting_for_safe_load


def available_slots(snapshot: Snapshot, knobs: Knobs) -> int:
    """Upstream's GetUpgradesAvailable (upgrade-state-machine.md §5)."""
    managed = [n for n in snapshot.nodes if n.driver is not None or n.state]
    required = [n for n in managed if n.state == m.REQUIRED]
    in_progress = sum(1 for n in managed if n.state not in m.IDLE_STATES)
    slots = len(required) if knobs.max_parallel == 0 else knobs.max_parallel - in_progress
    cap = knobs.unavailable_cap(managed=len(managed))
    if cap is not None:
        # Nodes about to be cordoned count as unavailable already.
        unavailable = sum(1 for n in managed if n.unschedulable or not n.ready or n.state == m.CORDON)
        slots = 0 if unavailable >= cap else min(slots, cap - unavailable)
    return max(slots, 0)


def plan(snapshot: Snapshot, knobs: Knobs) -> Plan:
    """Every node's step for one pass (see the module docstring)."""
    if not knobs.auto_upgrade:
        off = tuple(s for s in (_switched_off(n) for n in snapshot.nodes) if s is not None)
        return Plan(steps=off, slots=0, started=(), blocked={}, keys=snapshot.keys)
    slots = available_slots(snapshot, knobs)
    left = [slots]
    steps: list[Step] = []
    started: list[str] = []
    blocked: dict[str, str] = {}
    for state, nodes in snapshot.by_state().items():
        for node in nodes:
            if node.driver is None and state in m.IDLE_STATES:
                continue  # no driver pod here: nothing to upgrade
            work = Work(node=node, snapshot=snapshot, knobs=knobs)
            # Tells the node's driver manager that eviction and drain are ours (it skips its own).
            work.annotate(work.keys.enabled, "true")
            _walk(work, slots_left=left)
            step = work.result()
            if state == m.REQUIRED and step.after not in (m.REQUIRED, m.DONE):
                started.append(node.name)
            elif step.after == m.REQUIRED and step.waiting:
                blocked[node.name] = step.waiting
            if step.acts or step.waiting:
                steps.append(step)
    windows = knobs.windows
    waiting = windows is not None and any(s.waiting.startswith(WINDOW_CLOSED) for s in steps)
    opens = windows.next_open(snapshot.now) if windows is not None and waiting else None
    return Plan(steps=tuple(steps), slots=slots, started=tuple(started), blocked=blocked, keys=snapshot.keys,
                window_opens=opens)  # fmt: skip


def _switched_off(node: NodeView) -> Step | None:
    """Auto-upgrade off (or sandbox workloads): drop our bookkeeping, and our cordon if we put it there."""
    k = node.keys
    ours = (*timers(k), k.failure, k.initial_unschedulable, k.enabled, k.safe_load)
    if not node.state and not any(key in node.annotations for key in ours):
        return None  # nothing of ours on the node (most nodes, every pass): no step to build
    work = Work(node=node, snapshot=Snapshot(nodes=(), keys=k), knobs=Knobs())
    if node.state:
        work.labels[k.state] = None
    # A driver container waiting for a safe load would wait forever: nobody drains for it any more.
    for key in ours:
        if key in node.annotations:
            work.annotations[key] = None
    cordoned = node.state in m.CORDONED_STATES or node.state == m.FAILED
    if cordoned and node.unschedulable and not node.cordoned_by_admin and not node.held_by:
        work.unschedulable = False
    step = work.result()
    return step if step.acts else None


def _walk(work: Work, *, slots_left: list[int]) -> None:
    for _ in range(MAX_CHAIN):
        handler = _HANDLERS.get(work.state, _idle)  # unknown values (e.g. requestor mode) start over
        if not handler(work, slots_left):
            return


def _idle(work: Work, _slots: list[int]) -> bool:
    node = work.node
    if needs_upgrade(node):
        driver = node.driver
        assert driver is not None
        why = "driver pod is not managed by a DaemonSet" if driver.orphan else "driver pod is out of date"
        if driver.version and driver.target_version and driver.version != driver.target_version:
            why = f"driver {driver.version} -> {driver.target_version}"
        # Before the controller ever cordons: remember whether someone else did.
        if driver.in_sync and not driver.orphan and node.waiting_for_safe_load:
            why = "the new driver waits for the node to be drained (safe load)"
        work.annotate(work.keys.initial_unschedulable, _initially_cordoned(node))
        work.move(m.REQUIRED, why)
    elif work.state != m.DONE:
        work.move(m.DONE, "driver pod is up to date")
    return False  # one label write before anything disruptive


def _required(work: Work, slots: list[int]) -> bool:
    node = work.node
    if not needs_upgrade(node):
        work.finish("driver pod is up to date again")
        return False
    k = work.keys
    work.annotate(k.initial_unschedulable, _initially_cordoned(node))
    if node.skipped:
        work.wait(f"skipped: node label {k.skip}=true")
        return False
    if not _window_open(work):
        return False
    admit = work.knobs.admit
    if admit is not None and node.name not in admit:
        work.wait(work.knobs.admit_hold or "held by the canary stage")
        return False
    if slots[0] > 0:
        slots[0] -= 1
    elif not node.unschedulable:
        work.wait("waiting for an upgrade slot (maxParallelUpgrades / maxUnavailable)")
        return False
    # A requested upgrade keeps its annotation until the node is done: at pod-restart-required it makes the
    # driver pod restart even when in sync (a driver reload: what remediation's GPU reset asks for).
    driver = node.driver
    assert driver is not None
    restart_only = driver.running and driver.same_config and not driver.orphan
    # A driver waiting for a safe load wants the node drained first: no shortcut.
    if restart_only and not node.annotations.get(k.requested) and not node.waiting_for_safe_load:
        work.cordon()
        work.move(m.POD_RESTART, "same driver config: restart the driver pod only")
        return True
    work.move(m.CORDON, "upgrade slot taken")
    return True


def _window_open(work: Work) -> bool:
    """Whether a node may start now; if not, it waits saying when the next window opens. A node already
    under way is never stopped by a window closing: leaving it cordoned half-way helps nobody."""
    windows = work.knobs.windows
    why = windows.wait_reason(work.snapshot.now) if windows is not None else ""
    if why:
        work.wait(f"{WINDOW_CLOSED}: {why}")
    return not why


def _initially_cordoned(node: NodeView) -> str | None:
    """The initial-unschedulable annotation: "true" when someone other than an upgrade cordoned the node."""
    return "true" if node.unschedulable and not node.held_by else None


def _cordon(work: Work, _slots: list[int]) -> bool:
    work.cordon()
    work.move(m.WAIT_FOR_JOBS, "node cordoned", timer=work.keys.wait_start)
    return True


def _pods_unread(work: Work) -> bool:
    if work.node.pods_known:
        return False
    work.wait("reading the pods on the node")
    return True


def _wait_for_jobs(work: Work, _slots: list[int]) -> bool:
    if _pods_unread(work):
        return False
    selector = work.knobs.wait_selector
    if selector is not None:
        jobs = [p for p in work.node.pods if p.active and selector.matches(p.labels)]
        if jobs:
            if not work.timed_out(work.keys.wait_start, work.knobs.wait_timeout):
                work.wait(f"waiting for {len(jobs)} pod(s) to complete: {', '.join(p.key for p in jobs[:5])}")
                return False
            return _after_jobs(work, "timed out waiting for jobs to complete")
    return _after_jobs(work, "no jobs to wait for")


def _after_jobs(work: Work, why: str) -> bool:
    if work.knobs.pod_deletion:
        work.move(m.POD_DELETION, why, timer=work.keys.deletion_start)
    else:  # upstream without pod deletion (the OFED driver): straight to drain, which may be off
        work.move(m.DRAIN, why, timer=work.keys.drain_start if work.knobs.drain_enable else None)
    return True


def _pod_deletion(work: Work, _slots: list[int]) -> bool:
    if _pods_unread(work):
        return False
    pods, refused = pods_to_delete(work.node, work.knobs)
    if refused:
        return _deletion_failed(work, f"cannot delete GPU pods: {'; '.join(refused)}")
    if not pods:
        work.move(m.POD_RESTART, "no GPU pods left on the node")
        return True
    if work.timed_out(work.keys.deletion_start, work.knobs.deletion_timeout):
        return _deletion_failed(work, f"GPU pods still on the node after the timeout: {work.describe(pods)}")
    work.evict_pods(pods)
    work.wait(f"waiting for {len(pods)} GPU pod(s) to go: {work.describe(pods)}")
    return False


def _deletion_failed(work: Work, why: str) -> bool:
    if work.knobs.drain_enable:
        work.move(m.DRAIN, f"{why}; draining instead", timer=work.keys.drain_start)
        return True
    work.fail(why)
    return False


def _drain(work: Work, _slots: list[int]) -> bool:
    if not work.knobs.drain_enable:
        work.move(m.POD_RESTART, "drain disabled")
        return True
    if _pods_unread(work):
        return False
    pods, refused = node_pods_to_drain(work.node, work.knobs)
    if refused:
        work.fail(f"cannot drain: {'; '.join(refused)}")
        return False
    if not pods:
        work.move(m.POD_RESTART, "node drained")
        return True
    if work.timed_out(work.keys.drain_start, work.knobs.drain_timeout):
        work.fail(f"drain timed out: {work.describe(pods)}")
        return False
    work.evict_pods(pods)
    work.wait(f"draining {len(pods)} pod(s): {work.describe(pods)}")
    return False


def _pod_restart(work: Work, _slots: list[int]) -> bool:
    driver = work.node.driver
    if driver is None:
        work.wait("waiting for the driver DaemonSet to create the new driver pod")
        return False
    requested = work.node.annotations.get(work.keys.requested) == "true" and not _new_pod(work)
    if (not driver.in_sync or driver.orphan or requested) and not driver.terminating:
        work.delete_driver = driver.key
        work.wait(f"driver pod {driver.name} deleted; its DaemonSet creates the new one")
        return False
    if driver.terminating or not driver.in_sync:
        work.wait(f"waiting for the old driver pod {driver.name} to terminate")
        return False
    if work.node.waiting_for_safe_load:
        # The new driver container waits for this before loading: the node is ready for it now.
        work.annotate(work.keys.safe_load, None)
    if driver.running and driver.ready:
        if work.knobs.validation:
            work.move(m.VALIDATION, f"driver pod {driver.name} is ready", timer=work.keys.validation_start)
        else:
            work.leave_maintenance(f"driver pod {driver.name} is ready")
        return True
    if driver.restarts > work.knobs.max_driver_restarts:
        reason = f" ({driver.waiting_reason})" if driver.waiting_reason else ""
        work.fail(f"driver pod {driver.name} restarted {driver.restarts} times without becoming ready{reason}")
        return False
    reason = f": {driver.waiting_reason}" if driver.waiting_reason else ""
    work.wait(f"waiting for the driver pod {driver.name} to be ready{reason}")
    return False


def _validation(work: Work, _slots: list[int]) -> bool:
    if not work.knobs.validation:
        # No validator (the OFED driver has none): as upstream with no validation selector, the
        # ready driver pod that brought the node here is all there is to check.
        work.leave_maintenance("no validator to wait for")
        return True
    if not work.node.validators_known:
        work.wait("reading the validator pods on the node")
        return False
    driver = work.node.driver
    if driver is not None and (not driver.in_sync or driver.orphan) and not driver.terminating:
        # The driver changed while its predecessor was being validated (a canary rolled back from a driver
        # that fails validation): the node is still cordoned and drained, so the new driver pod comes at
        # once instead of after the validation timeout.
        work.move(m.POD_RESTART, "the driver changed during validation: restarting the driver pod")
        return True
    fresh = _fresh_validators(work, born=driver.created if driver is not None else 0.0)
    if fresh and all(v.phase == "Running" and v.ready for v in fresh):
        work.leave_maintenance("validation passed")
        return True
    gave_up = next((v for v in fresh if v.init_failure), None)
    if gave_up is not None:
        # A check that gave up on this driver (the CUDA check exits after failing for 10 s): a definite
        # answer, so the node fails now rather than at the validation timeout, and a canary halts.
        work.fail(f"validator pod {gave_up.name} failed on this driver: {gave_up.init_failure}")
        return False
    if work.timed_out(work.keys.validation_start, work.knobs.validation_timeout):
        work.fail(f"validation did not pass within {work.knobs.validation_timeout:g} s")
        return False
    work.wait("waiting for the operator validator to pass on the new driver")
    return False


def _uncordon(work: Work, _slots: list[int]) -> bool:
    driver = work.node.driver
    if driver is not None and (not driver.in_sync or driver.orphan) and not driver.terminating:
        # The driver changed again before the node was uncordoned (a node NVIDIA's operator left here,
        # or a policy changed while we were down): upgrading again at once, still cordoned, spares the
        # workloads that an uncordon would let in only to evict them at the next cordon.
        work.move(m.CORDON, "the driver changed again before the node was uncordoned: upgrading again")
        return True
    if work.node.held_by:
        # The other driver's upgrade still needs the node cordoned: it uncordons when it is done.
        work.finish(f"the node stays cordoned for the {work.node.held_by} driver's upgrade")
        return False
    if not work.node.cordoned_by_admin:
        work.unschedulable = False
    work.finish("node uncordoned")
    return False


def _failed(work: Work, _slots: list[int]) -> bool:
    driver = work.node.driver
    if driver is not None and driver.in_sync and not driver.orphan and driver.running and driver.ready:
        if _validated(work, born=driver.created):
            work.annotate(work.keys.failure, None)
            work.leave_maintenance(f"driver pod {driver.name} is ready again: recovered")
            return True
        failure = work.node.annotations.get(work.keys.failure, "upgrade failed")
        work.wait(f"{failure}; recovers once the validator passes on driver pod {driver.name}")
        return False
    if driver is not None and not driver.in_sync and not driver.orphan and not driver.terminating and _new_pod(work):
        # The new driver failed and the driver changed since (a fixed spec.driver, or a canary rollout rolling
        # back): the node, still cordoned, upgrades again to it. Its slot was never given back. A canary
        # stage decides when: a node it does not admit waits (it must not get a driver before its canaries).
        admit = work.knobs.admit
        if admit is not None and work.node.name not in admit:
            failure = work.node.annotations.get(work.keys.failure, "upgrade failed")
            work.wait(f"{failure}; the changed driver comes later ({work.knobs.admit_hold or 'canary stage'})")
            return False
        work.annotate(work.keys.failure, None)
        work.move(m.CORDON, "the driver changed since the upgrade failed: upgrading again")
        return True
    work.wait(work.node.annotations.get(work.keys.failure, "upgrade failed"))
    return False


def _validated(work: Work, *, born: float) -> bool:
    """Whether a failed node's ready driver also passed validation (always, without a validator): a node
    that failed validation stays failed while its validator fails, not only until its driver pod is Ready
    again. A validator older than the driver pod is restarted so that it checks this driver."""
    if not work.knobs.validation:
        return True
    if not work.node.validators_known:
        return False
    fresh = _fresh_validators(work, born=born)
    return bool(fresh) and all(v.phase == "Running" and v.ready for v in fresh)


def _fresh_validators(work: Work, *, born: float) -> list[PodView]:
    """The validator pods newer than the driver pod (created at ``born``). An older one validated the old
    driver: it does not count, and it is restarted so that its checks run against the new driver."""
    work.restart.extend(v.key for v in work.node.validators if v.created < born and not v.terminating)
    return [v for v in work.node.validators if v.created >= born and not v.terminating]


def _new_pod(work: Work) -> bool:
    """Whether the node's driver pod was created during its upgrade (after its first timer started): the
    failed pod is the new driver's, not the old one the upgrade never got to replace."""
    started = timer_starts(work.node.annotations, work.keys)
    driver = work.node.driver
    return driver is not None and bool(started) and driver.created >= min(started)


def _done(work: Work, slots: list[int]) -> bool:
    return _idle(work, slots)


_HANDLERS = {
    m.UNKNOWN: _idle,
    m.DONE: _done,
    m.REQUIRED: _required,
    m.CORDON: _cordon,
    m.WAIT_FOR_JOBS: _wait_for_jobs,
    m.POD_DELETION: _pod_deletion,
    m.DRAIN: _drain,
    m.POD_RESTART: _pod_restart,
    m.VALIDATION: _validation,
    m.UNCORDON: _uncordon,
    m.FAILED: _failed,
}
