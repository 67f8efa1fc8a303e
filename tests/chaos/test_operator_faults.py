"""The operator's own process fails: SIGKILLed the first time each upgrade state shows up (a new process
started at once, as its Deployment would), a new process finding nodes in the states ours only passes
through (left there by NVIDIA's operator, which records each), and the Lease holder paused with SIGSTOP
past the Lease.

What must hold: the rollout finishes with every driver pod replaced exactly once, every node cordoned
once and uncordoned once, no node stepping back a state; a new process is in charge within 30 s of its
start (upstream's e2e allows 100 s); a standby takes a paused leader's Lease within 17 s
(controller-runtime's figure), and the paused process, woken, reconciles nothing while it holds no Lease.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.runtime.leader import LEASE_SECONDS, RETRY_SECONDS
from gpu_operator.upgrade import model as m
from tests.chaos.conftest import OperatorFactory
from tests.chaos.harness import (
    NEW,
    OLD,
    TRANSIENT,
    OperatorProcess,
    UpgradeWatch,
    held_by,
    lease,
    policy,
    record,
    running,
    steps_back,
    trainer,
    utcnow,
    wait_states,
)

RESTART_ALLOWANCE = 30.0  # goals-and-anchors §9 target 5; upstream's e2e allows 100 s
FAILOVER_ALLOWANCE = LEASE_SECONDS + RETRY_SECONDS  # 17 s
#: The SIGKILL tests run the operator with upstream's --leader-lease-renew-deadline at 2 s (a 7 s Lease):
#: what they prove is that each new process continues the rollout, not how long a Lease lasts (the
#: paused-leader test keeps the default 15 s Lease and measures that), and each of the dozen or so kills
#: then waits 7 s for the killed process's Lease, not 15 s.
SHORT_LEASE = ("--leader-lease-renew-deadline", "2s")


@pytest.mark.timeout(1200)
def test_operator_sigkilled_in_every_upgrade_state(
    client: Client, namespace: str, nodes: Callable[[int], list[str]], operators: OperatorFactory
) -> None:
    names = nodes(4)
    operator = operators(args=SHORT_LEASE)
    client.create(codecs.from_dict(policy(version=OLD, max_parallel=1)))
    wait_states(client, names, want=m.DONE, timeout=300, describe="every node upgrade-done on the first version")
    # GPU pods on the nodes make pod deletion a state that lasts long enough to be caught in.
    client.create(trainer(namespace, replicas=4))
    wait_for(lambda: running(client, namespace) == 4, timeout=180, describe="4 GPU pods running", retry_on=TRANSIENT)
    killed: list[str] = []
    at_kills: set[str] = set()  # every node's state at each kill: the nodes waiting their turn count too
    in_charge: list[float] = []
    with UpgradeWatch(client=client, nodes=names, namespace=namespace) as watch:
        client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                     patch_type=PatchType.MERGE)  # fmt: skip
        deadline = time.monotonic() + 300
        while {watch.history[n][-1] if watch.history[n] else "" for n in names} != {m.DONE} or not killed:
            assert time.monotonic() < deadline, f"rollout did not finish: {dict(watch.history)}"
            fresh = [s for s in watch.seen_states if s not in m.IDLE_STATES and s not in killed]
            if fresh:
                killed.extend(fresh)
                operator.kill()
                at_kills.update(watch.history[n][-1] for n in names if watch.history[n])
                started, started_at = time.monotonic(), utcnow()
                operator.start()
                wait_for(lambda at=started_at: held_by(client, namespace, operator, after=at), timeout=120,  # type: ignore[misc]
                         describe="the new process holds the Lease", interval=0.1, retry_on=TRANSIENT)  # fmt: skip
                in_charge.append(time.monotonic() - started)
            time.sleep(0.05)
        watch.catch_up()
    for node in names:
        assert len(watch.driver_uids[node]) == 2, (node, watch.driver_uids[node])  # replaced exactly once
        assert watch.cordon_flips[node] == [False, True, False], (node, watch.cordon_flips[node])
        assert steps_back(watch.history[node]) == [], (node, watch.history[node])
    assert watch.max_in_progress <= 1
    assert {m.POD_RESTART, m.VALIDATION} <= set(killed), killed
    states = [s for s in m.STATES if s in at_kills - {m.UNKNOWN, m.DONE}]
    record("operator SIGKILLed in every upgrade state", states_killed_in=states, kills=len(killed),
           back_in_charge_max_s=round(max(in_charge), 2), back_in_charge_each_s=[round(s, 1) for s in in_charge],
           allowance_s=RESTART_ALLOWANCE, nodes=len(names), lease_flags=" ".join(SHORT_LEASE))  # fmt: skip
    assert max(in_charge) <= RESTART_ALLOWANCE


#: The states our operator passes through within one pass (never recorded on a Node), as NVIDIA's
#: operator leaves them when it stops there: (state, cordoned).
PASSED_THROUGH = ((m.CORDON, False), (m.DRAIN, True), (m.UNCORDON, True))


@pytest.mark.timeout(900)
def test_a_new_process_continues_from_states_it_only_passes_through(
    client: Client, namespace: str, nodes: Callable[[int], list[str]], operators: OperatorFactory
) -> None:
    names = nodes(len(PASSED_THROUGH))
    operator = operators(args=SHORT_LEASE)
    client.create(codecs.from_dict(policy(version=OLD, max_parallel=1)))
    wait_states(client, names, want=m.DONE, timeout=300, describe="every node upgrade-done on the first version")
    operator.kill()
    # What a process stopped in each of these states leaves: a new driver version asked for, each node's state.
    client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                 patch_type=PatchType.MERGE)  # fmt: skip
    for node, (state, cordoned) in zip(names, PASSED_THROUGH, strict=True):
        client.patch(Node, node, {"metadata": {"labels": {m.STATE_LABEL: state}}, "spec": {"unschedulable": cordoned}},
                     patch_type=PatchType.MERGE)  # fmt: skip
    with UpgradeWatch(client=client, nodes=names, namespace=namespace) as watch:
        started, started_at = time.monotonic(), utcnow()
        operator.start()
        wait_for(lambda: held_by(client, namespace, operator, after=started_at), timeout=120, interval=0.1,
                 describe="the new process holds the Lease", retry_on=TRANSIENT)  # fmt: skip
        in_charge = time.monotonic() - started
        wait_for(lambda: _upgraded(watch, names), timeout=300, describe="every node upgraded to the new driver",
                 retry_on=TRANSIENT)  # fmt: skip
        watch.catch_up()
    for node, (state, cordoned) in zip(names, PASSED_THROUGH, strict=True):
        assert watch.history[node][0] == state, (node, watch.history[node])
        assert len(watch.driver_uids[node]) == 2, (node, watch.driver_uids[node])  # replaced exactly once
        assert watch.cordon_flips[node][-1] is False, (node, watch.cordon_flips[node])
        flips = watch.cordon_flips[node]
        assert flips.count(False) <= 2 - cordoned, (node, flips, watch.history[node])  # never uncordoned between
        # From the found state on, only forward (uncordon-required starts the cycle again, still cordoned).
        assert steps_back(watch.history[node][1:]) == [], (node, watch.history[node])
    record("operator found nodes in the states it only passes through",
           states=[s for s, _ in PASSED_THROUGH], back_in_charge_s=round(in_charge, 2), nodes=len(names),
           allowance_s=RESTART_ALLOWANCE, lease_flags=" ".join(SHORT_LEASE))  # fmt: skip
    assert in_charge <= RESTART_ALLOWANCE


def _upgraded(watch: UpgradeWatch, names: list[str]) -> bool:
    """Every node upgrade-done, uncordoned, with its driver pod replaced (two pods seen)."""
    return all(
        watch.history[n][-1:] == [m.DONE] and watch.cordon_flips[n][-1:] == [False] and len(watch.driver_uids[n]) >= 2
        for n in names
    )


@pytest.mark.timeout(600)
def test_a_paused_lease_holder_is_replaced_and_acts_no_more(
    client: Client, namespace: str, nodes: Callable[[int], list[str]], operators: OperatorFactory
) -> None:
    nodes(1)
    begun = utcnow()
    first = operators(name="first")
    wait_for(lambda: held_by(client, namespace, first, after=begun), timeout=60,
             describe="the first operator leads", retry_on=TRANSIENT)  # fmt: skip
    client.create(codecs.from_dict(policy(version=OLD)))
    second = operators(name="second")
    wait_for(second.healthy, timeout=60, describe="the standby running")
    wait_for(lambda: first.metric("gpu_operator_reconciliation_total") > 0, timeout=60,
             describe="the leader reconciling", retry_on=TRANSIENT)  # fmt: skip
    before = wait_for(_settled(first), timeout=120, describe="the leader idle (no pass in flight)", retry_on=TRANSIENT)

    first.signal(signal.SIGSTOP)
    paused, paused_at = time.monotonic(), utcnow()
    wait_for(lambda: held_by(client, namespace, second, after=paused_at), timeout=60, interval=0.1,
             describe="the standby took the Lease over", retry_on=TRANSIENT)  # fmt: skip
    failover = time.monotonic() - paused
    time.sleep(max(0.0, LEASE_SECONDS + 5 - (time.monotonic() - paused)))  # paused well past the Lease
    first.signal(signal.SIGCONT)
    woken = time.monotonic()
    # Work arrives for whoever leads: only the new leader may act on it.
    for poke in range(3):
        client.patch(ClusterPolicyResource, "cluster-policy", {"metadata": {"annotations": {"chaos/poke": str(poke)}}},
                     patch_type=PatchType.MERGE)  # fmt: skip
        time.sleep(2)
    holder, _ = lease(client, namespace)
    assert holder.split("-")[-2] == str(second.pid), holder  # the woken process did not take it back
    assert first.metric("gpu_operator_reconciliation_total") == before, "the paused leader acted after waking"
    assert second.metric("gpu_operator_reconciliation_total") > 0  # the new leader did
    assert first.alive()
    assert first.healthy()  # a follower again, not a crash
    record("Lease holder paused (SIGSTOP) past the Lease", failover_s=round(failover, 2),
           paused_s=round(woken - paused, 1), passes_by_woken_process=0, allowance_s=FAILOVER_ALLOWANCE)  # fmt: skip
    assert failover <= FAILOVER_ALLOWANCE + 1.0


def _settled(process: OperatorProcess) -> Callable[[], float | None]:
    """A check that returns the process's pass count once it has not moved for 2 s."""
    seen: list[tuple[float, float]] = []

    def check() -> float | None:
        count, now = process.metric("gpu_operator_reconciliation_total"), time.monotonic()
        if not seen or seen[-1][0] != count:
            seen.append((count, now))
            return None
        return count if now - seen[-1][1] >= 2.0 else None

    return check
