"""Lease-based leader election against an in-memory Lease: who may take it, what each renewal costs, and
what a holding keeps across renewals. Expiry is shown with renewal times in the past, so nothing sleeps."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

import gpu_operator.runtime.leader as leader_module
from gpu_operator.runtime.leader import LEASE_NAME, LEASE_SECONDS, RENEW_DEADLINE, LeaderElection, LeaseTiming

JSON = dict[str, Any]
NAMESPACE = "gpu-operator"


class FakeLeases:
    """The three calls the election makes, on one stored Lease; counts them."""

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.calls: list[str] = []

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None:
        assert (api_version, kind, name, namespace) == ("coordination.k8s.io/v1", "Lease", LEASE_NAME, NAMESPACE)
        self.calls.append("get")
        return self.lease

    async def apply(self, obj: JSON) -> JSON:
        self.calls.append("apply")
        self.lease = obj
        return obj

    async def delete(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> bool:
        self.calls.append("delete")
        self.lease = None
        return True


def _micro(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _held_by(holder: str, *, seconds_ago: float) -> JSON:
    renewed = _micro(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago))
    spec = {"holderIdentity": holder, "leaseDurationSeconds": LEASE_SECONDS, "acquireTime": renewed}
    return {"metadata": {"name": LEASE_NAME}, "spec": {**spec, "renewTime": renewed}}


def _election(leases: FakeLeases, identity: str = "me") -> LeaderElection:
    return LeaderElection(store=leases, namespace=NAMESPACE, identity=identity)


def test_an_absent_lease_is_taken() -> None:
    leases = FakeLeases()
    election = _election(leases)
    assert asyncio.run(election.try_acquire())
    assert election.held
    assert leases.lease is not None
    spec = leases.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("me", LEASE_SECONDS)
    assert spec["acquireTime"] == spec["renewTime"]
    assert leases.lease["metadata"] == {"name": LEASE_NAME, "namespace": NAMESPACE}


def test_a_live_lease_of_another_holder_is_left_alone() -> None:
    leases = FakeLeases()
    leases.lease = _held_by("other", seconds_ago=LEASE_SECONDS - 3)
    election = _election(leases)
    assert not asyncio.run(election.try_acquire())
    assert not election.held
    assert leases.calls == ["get"]  # a standby only reads
    assert leases.lease["spec"]["holderIdentity"] == "other"


def test_an_expired_lease_of_another_holder_is_taken_with_a_new_acquire_time() -> None:
    leases = FakeLeases()
    leases.lease = _held_by("crashed", seconds_ago=LEASE_SECONDS + 1)
    old_acquire = leases.lease["spec"]["acquireTime"]
    election = _election(leases)
    assert asyncio.run(election.try_acquire())
    spec = leases.lease["spec"]
    assert spec["holderIdentity"] == "me"
    assert spec["acquireTime"] != old_acquire
    assert spec["acquireTime"] == spec["renewTime"]


def test_renewals_are_one_write_and_keep_the_acquire_time() -> None:
    async def scenario() -> tuple[list[str], JSON]:
        leases = FakeLeases()
        election = _election(leases)
        await election.try_acquire()
        acquired = leases.lease["spec"]["acquireTime"] if leases.lease else None
        leases.calls.clear()
        for _ in range(3):
            assert await election.try_acquire()
        assert leases.lease is not None
        assert leases.lease["spec"]["acquireTime"] == acquired
        return leases.calls, leases.lease

    calls, lease = asyncio.run(scenario())
    assert calls == ["apply", "apply", "apply"]  # no read while the holding is fresh
    assert lease["spec"]["renewTime"] >= lease["spec"]["acquireTime"]


def test_a_restarted_holder_keeps_its_acquire_time() -> None:
    """The same identity coming back (a restart that kept its name) renews the holding it had."""
    leases = FakeLeases()
    leases.lease = _held_by("me", seconds_ago=2)
    acquired = leases.lease["spec"]["acquireTime"]
    assert asyncio.run(_election(leases).try_acquire())
    assert leases.lease["spec"]["acquireTime"] == acquired


def test_release_deletes_the_lease_only_when_held() -> None:
    async def scenario() -> list[str]:
        leases = FakeLeases()
        leases.lease = _held_by("other", seconds_ago=1)
        standby = _election(leases, identity="standby")
        await standby.try_acquire()
        await standby.release()  # not ours: left alone
        assert leases.lease is not None
        leases.lease = None
        leader = _election(leases)
        await leader.try_acquire()
        await leader.release()
        assert leases.lease is None
        assert not leader.held
        return leases.calls

    assert asyncio.run(scenario()) == ["get", "get", "apply", "delete"]


def test_the_lease_is_owned_by_the_operator_pod_so_it_goes_with_it() -> None:
    # helm uninstall removes the chart's RBAC while the operator terminates, so its own delete of the
    # Lease may be refused: the garbage collector removes the Lease once the pod is gone.
    leases = FakeLeases()
    election = LeaderElection(store=leases, namespace=NAMESPACE, identity="me", owner_pod=("gpu-operator-abc", "uid-1"))
    assert asyncio.run(election.try_acquire())
    assert leases.lease is not None
    assert leases.lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "gpu-operator-abc", "uid": "uid-1"}
    ]
    assert "ownerReferences" not in _election(FakeLeases())._body(dt.datetime.now(dt.UTC))["metadata"]


def test_a_leader_paused_past_its_renew_deadline_is_not_fresh_until_it_renews() -> None:
    """SIGSTOP, a frozen VM: the process wakes with ``leading`` still set; ``fresh`` says not to act."""
    clock = [1000.0]
    leases = FakeLeases()
    election = LeaderElection(store=leases, namespace=NAMESPACE, identity="me", monotonic=lambda: clock[0])
    assert asyncio.run(election.try_acquire())
    assert election.fresh()
    clock[0] += RENEW_DEADLINE - 0.5
    assert election.fresh()  # a late renewal, still inside the deadline
    clock[0] += 1.0
    assert election.held  # nothing has run since the pause...
    assert not election.fresh()  # ...but its work must not: a standby may take the Lease at any moment
    leases.lease = _held_by("standby", seconds_ago=1)  # and one did
    assert not asyncio.run(election.try_acquire())
    assert not election.held
    assert not election.fresh()


def test_fresh_counts_from_when_the_renewal_began_not_when_it_returned() -> None:
    clock = [0.0]

    class SlowLeases(FakeLeases):
        async def apply(self, obj: JSON) -> JSON:
            clock[0] += 4.0  # the write took 4 s: the Lease's renewTime is from before it
            return await super().apply(obj)

    election = LeaderElection(store=SlowLeases(), namespace=NAMESPACE, identity="me", monotonic=lambda: clock[0])
    assert asyncio.run(election.try_acquire())
    assert election.renewed_at == 0.0
    clock[0] = RENEW_DEADLINE + 0.1
    assert not election.fresh()


class FailingLeases(FakeLeases):
    """Writes fail (or hang) while ``broken``: an API server whose etcd is away."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False
        self.hang = False

    async def apply(self, obj: JSON) -> JSON:
        if self.hang:
            await asyncio.Event().wait()  # never answers: the election's own timeout must end it
        if self.broken:
            raise ConnectionError("etcd is away")
        return await super().apply(obj)


def test_a_failed_renewal_keeps_leadership_until_the_renew_deadline() -> None:
    clock = [0.0]
    leases = FailingLeases()
    election = LeaderElection(store=leases, namespace=NAMESPACE, identity="me", monotonic=lambda: clock[0])
    assert asyncio.run(election.try_acquire())
    leases.broken = True
    clock[0] = 6.0
    with pytest.raises(ConnectionError):
        asyncio.run(election.step())
    assert election.held  # a blip: the Lease is surely still ours, work goes on
    assert election.fresh()
    clock[0] = RENEW_DEADLINE + 0.1
    with pytest.raises(ConnectionError):
        asyncio.run(election.step())
    assert not election.held  # past the deadline another replica may take it: stop
    leases.broken = False
    assert asyncio.run(election.step()).after is not None
    assert election.held


def test_a_lease_request_that_hangs_is_abandoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_module, "REQUEST_SECONDS", 0.0)
    leases = FailingLeases()
    leases.hang = True
    election = LeaderElection(store=leases, namespace=NAMESPACE, identity="me")
    with pytest.raises(TimeoutError):
        asyncio.run(election.step())
    assert not election.held


def test_upstreams_renew_deadline_sets_the_lease_its_renewals_and_a_standbys_tries() -> None:
    """--leader-lease-renew-deadline: the Lease lasts the deadline and 5 s more, as upstream's manager."""
    default = LeaseTiming()
    assert (default.duration, default.renew, default.retry, default.deadline) == (15, 5.0, 2.0, RENEW_DEADLINE)
    ten = LeaseTiming.from_renew_deadline(10.0)
    assert (ten.duration, ten.renew, ten.retry, ten.deadline) == (15, 5.0, 2.0, 10.0)
    short = LeaseTiming.from_renew_deadline(1.5)
    assert (short.duration, short.renew, short.retry, short.deadline) == (7, 0.75, 0.75, 1.5)
    with pytest.raises(ValueError, match="from 1 to 3600 s"):
        LeaseTiming.from_renew_deadline(0.5)  # renewals every 0.25 s would hammer the API server


def test_a_short_lease_is_written_renewed_and_given_up_on_its_own_times() -> None:
    leases = FailingLeases()
    clock = [100.0]
    timing = LeaseTiming.from_renew_deadline(2.0)
    election = LeaderElection(store=leases, namespace=NAMESPACE, identity="me", monotonic=lambda: clock[0],
                              timing=timing)  # fmt: skip
    assert asyncio.run(election.step()).after == 1.0  # renewed twice within the deadline
    assert leases.lease is not None
    assert leases.lease["spec"]["leaseDurationSeconds"] == 7
    leases.broken = True
    clock[0] += 1.9
    with pytest.raises(ConnectionError):
        asyncio.run(election.step())
    assert election.held  # within the 2 s deadline
    clock[0] += 0.2
    with pytest.raises(ConnectionError):
        asyncio.run(election.step())
    assert not election.held  # past it: another replica may take the Lease 5 s later, so stop now
    standby = LeaderElection(store=leases, namespace=NAMESPACE, identity="other", timing=timing)
    leases.broken = False
    assert asyncio.run(standby.step()).after == 1.0  # a standby tries at the short pace too


@pytest.mark.parametrize("value", ["10", "500ms", "2h", "ten"])
def test_the_operator_refuses_a_renew_deadline_it_cannot_use_naming_the_flag(value: str) -> None:
    from click.testing import CliRunner  # noqa: PLC0415 - only this test runs the command

    from gpu_operator.cli.operator import operator_command  # noqa: PLC0415

    result = CliRunner().invoke(operator_command, ["--namespace", "x", "--leader-lease-renew-deadline", value])
    assert result.exit_code == 2
    assert f'--leader-lease-renew-deadline: "{value}" is not a duration from 1s to 1h' in result.output
