"""Canary rollouts (our extension ``upgradePolicy.canary``): the pure stage machine in front of a rollout.

A change of ``spec.driver`` (a new version, image or driver setting; its digest is the rollout's
*target*) first goes to a few canary nodes only. Once they run the new driver and passed the
validator, they *soak*: for ``soakSeconds`` the health gates must hold (driver and validator pods
Ready, no GpuUnhealthy XID Event on a canary, the exporter Ready, the user's probe Job succeeded).
Then the rollout *proceeds* to every node as before (the same ``plan``). A failed gate *halts* it:
no other node starts, and with ``autoRollback`` the reconciler renders the *last good* ``spec.driver``
(kept in the rollout's ConfigMap) again, so only the canaries' driver pods are out of date and the
upgrade machine takes them back; every other node stays in sync and is never touched. A rolled-back
rollout stays stopped until ``spec.driver`` changes.

Everything is kept on the cluster (:class:`Rollout`, one ConfigMap per partition, written only by
the upgrade controller) and :func:`advance` is pure: a restarted operator continues from the
ConfigMap and the nodes. Which driver spec a pod runs is told by the ``DRIVER_SPEC_DIGEST``
annotation the reconciler puts on each driver DaemonSet (``DriverPodView.spec_digest``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import CanaryKnobs, NodeView, Snapshot
from gpu_operator.upgrade.plan import needs_upgrade
from gpu_operator.upgrade.steps import timer_starts

IDLE = ""
CANARY = "canary"
SOAKING = "soaking"
PROCEEDING = "proceeding"
HALTED = "halted"
ROLLING_BACK = "rolling-back"
ROLLED_BACK = "rolled-back"
PHASES = (IDLE, CANARY, SOAKING, PROCEEDING, HALTED, ROLLING_BACK, ROLLED_BACK)
#: Phases a rollback can be asked in: only the canaries run the new driver.
ROLLBACK_FROM = (CANARY, SOAKING, HALTED)
#: Phases in which the reconciler renders the last good driver instead of ``spec.driver``.
ROLLBACK_PHASES = frozenset({ROLLING_BACK, ROLLED_BACK})
#: The Events of each phase change, on the policy (reason, warning).
EVENTS = {
    CANARY: ("DriverCanaryStarted", False),
    SOAKING: ("DriverCanarySoaking", False),
    PROCEEDING: ("DriverCanaryPassed", False),
    HALTED: ("DriverRolloutHalted", True),
    ROLLING_BACK: ("DriverRollingBack", True),
    ROLLED_BACK: ("DriverRolledBack", True),
    IDLE: ("DriverRolloutComplete", False),
}
PROBE_SUCCEEDED, PROBE_RUNNING = "succeeded", "running"


def driver_spec_digest(driver: Mapping[str, Any] | None) -> str:
    """The digest of a ``spec.driver`` section as JSON, without ``upgradePolicy`` (how a rollout is
    made is not what it brings)."""
    body = {k: v for k, v in (driver or {}).items() if k != "upgradePolicy"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """A partition's rollout as kept in its ConfigMap."""

    phase: str = IDLE
    target: str = ""  # the spec.driver digest the rollout brings
    target_version: str = ""
    good: str = ""  # the last spec.driver digest every node ran: what a rollback returns to
    good_version: str = ""
    good_driver: str = ""  # that spec.driver as JSON (without upgradePolicy): what the reconciler renders back
    canaries: tuple[str, ...] = ()
    since: float = 0.0  # when the phase began (unix seconds)
    # When the first canary left upgrade-required (0: none yet): the canary's timeout counts from here, not
    # from the stage's start, so a canary held by a closed maintenance window or a full slot is not late.
    started: float = 0.0
    reason: str = ""
    rollback_requested: bool = False  # `gpu-operator upgrade rollback` asked (an annotation; not kept in data)

    def data(self) -> dict[str, str]:
        """The ConfigMap's data."""
        return {
            "phase": self.phase, "target": self.target, "targetVersion": self.target_version, "good": self.good,
            "goodVersion": self.good_version, "goodDriver": self.good_driver, "canaries": ",".join(self.canaries),
            "since": f"{self.since:.3f}", "started": f"{self.started:.3f}", "reason": self.reason,
        }  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None, *, rollback_requested: bool = False) -> Rollout:
        d = dict(data or {})
        try:
            since = float(d.get("since") or 0.0)
            started = float(d.get("started") or 0.0)
        except ValueError:
            since = started = 0.0  # a hand-edited value: the phase starts over its timer
        phase = d.get("phase", "")
        return cls(
            phase=phase if phase in PHASES else IDLE, target=d.get("target", ""),
            target_version=d.get("targetVersion", ""), good=d.get("good", ""), good_version=d.get("goodVersion", ""),
            good_driver=d.get("goodDriver", ""), canaries=tuple(n for n in d.get("canaries", "").split(",") if n),
            since=since, started=started, reason=d.get("reason", ""), rollback_requested=rollback_requested,
        )  # fmt: skip

    def rendered_driver(self, *, target: str) -> dict[str, Any] | None:
        """The ``spec.driver`` the reconciler renders instead of the policy's (None: the policy's own).
        Only while rolling back from this very target: a newer spec.driver ends the rollback."""
        if self.phase not in ROLLBACK_PHASES or self.target != target or not self.good_driver:
            return None
        parsed = json.loads(self.good_driver)
        return parsed if isinstance(parsed, dict) else None


@dataclass(frozen=True, kw_only=True)
class GateFacts:
    """What the gates read about the canaries (only read while a canary stage runs)."""

    xids: Mapping[str, str] = field(default_factory=dict)  # node -> its first GpuUnhealthy message since the start
    exporter: Mapping[str, bool] = field(default_factory=dict)  # node -> its exporter pod Ready (absent: none)
    validators: Mapping[str, bool] = field(default_factory=dict)  # node -> its validator pod Ready (absent: none)
    probes: Mapping[str, str] = field(default_factory=dict)  # node -> "running", "succeeded" or why it failed


@dataclass(frozen=True, kw_only=True)
class Target:
    """The spec.driver the policy asks for now."""

    digest: str
    version: str = ""
    driver: str = ""  # spec.driver as JSON, without upgradePolicy


@dataclass(frozen=True, kw_only=True)
class Decision:
    rollout: Rollout
    allowed: frozenset[str] | None = None  # the idle nodes that may start now; None: any
    hold: str = ""  # why the other nodes wait
    events: tuple[tuple[str, str, bool], ...] = ()  # (reason, message, warning) on the policy
    probes: tuple[str, ...] = ()  # canaries whose probe Job should run now
    wake_in: float | None = None  # seconds until the soak ends


def _on(node: NodeView | None, digest: str) -> bool:
    """The node runs the driver of ``digest``, up to date, Ready and finished upgrading."""
    d = node.driver if node is not None else None
    if node is None or d is None:
        return False
    return d.in_sync and not d.orphan and d.spec_digest == digest and d.ready and node.state in (m.DONE, m.UNKNOWN)


def settled(snapshot: Snapshot, digest: str) -> bool:
    """Every node with a driver pod runs the driver of ``digest`` and none is mid-upgrade. Nodes that
    cannot get there are not waited for: one labelled to skip upgrades, or a Node not Ready (else one
    down node would keep a rollout from ever completing, and its driver from becoming the good one)."""
    nodes = [n for n in snapshot.nodes if (n.driver is not None or n.state) and not n.skipped and n.ready]
    return bool(nodes) and all(_on(n, digest) and not needs_upgrade(n) for n in nodes)


def pick(snapshot: Snapshot, knobs: CanaryKnobs) -> tuple[str, ...]:
    """The canaries: the named nodes that run a driver, else the first ``count`` by name that need the new one."""
    if knobs.names:
        present = {n.name for n in snapshot.nodes if n.driver is not None}
        return tuple(n for n in knobs.names if n in present)
    # Healthy nodes first: one left failed by an earlier rollout would say more about that than about this one.
    ready = sorted((n.state == m.FAILED, n.name) for n in snapshot.nodes
                   if needs_upgrade(n) and not n.skipped and n.ready)  # fmt: skip
    return tuple(name for _, name in ready[: knobs.count])


class _Change:
    """The rollout being advanced and the Events its phase changes raise."""

    def __init__(self, rollout: Rollout, now: float) -> None:
        self.rollout, self.now = dataclasses.replace(rollout, rollback_requested=False), now
        self.events: list[tuple[str, str, bool]] = []

    def to(self, phase: str, message: str, **changes: Any) -> None:
        self.rollout = dataclasses.replace(self.rollout, phase=phase, since=self.now, **changes)
        reason, warning = EVENTS[phase]
        self.events.append((reason, message, warning))

    def decide(self, **kwargs: Any) -> Decision:
        return Decision(rollout=self.rollout, events=tuple(self.events), **kwargs)


def advance(
    rollout: Rollout, *, snapshot: Snapshot, knobs: CanaryKnobs | None, target: Target, facts: GateFacts
) -> Decision:
    """The rollout's next state and what the planner may start (see the module docstring)."""
    c = _Change(rollout, snapshot.now)
    r = c.rollout
    # Past the canary stage other nodes run the new driver too: only spec.driver takes them all back.
    if rollout.rollback_requested and r.good_driver and r.phase in ROLLBACK_FROM:
        c.to(ROLLING_BACK, f"rollback requested: canaries {', '.join(r.canaries)} return to {r.good_version}",
             reason="rollback requested with `gpu-operator upgrade rollback`")  # fmt: skip
        return c.decide(allowed=frozenset(r.canaries), hold=f"rolling back: {c.rollout.reason}")
    if r.phase in ROLLBACK_PHASES and r.target == target.digest:
        if r.phase == ROLLING_BACK:
            if settled(snapshot, r.good):
                c.to(ROLLED_BACK, f"canaries {', '.join(r.canaries)} are back on driver {r.good_version}; the rollout "
                     f"of {r.target_version} stays stopped until spec.driver changes", reason=r.reason)  # fmt: skip
                return c.decide()
            return c.decide(allowed=frozenset(r.canaries), hold=f"rolling back: {r.reason}")
        return c.decide()
    if r.phase in (CANARY, SOAKING, PROCEEDING, HALTED, *ROLLBACK_PHASES) and r.target != target.digest:
        # spec.driver changed under way: back to idle, where a new change starts a new canary stage. Past the
        # canary stage some nodes run the last good driver and some the passed one: neither is what every node
        # runs, so nothing is kept to roll back to and the new driver rolls without a canary stage (returning
        # canaries to a driver the others left would leave the fleet split for good).
        if r.phase == PROCEEDING:
            r = dataclasses.replace(r, good="", good_version="", good_driver="")
        c.rollout = dataclasses.replace(r, phase=IDLE, canaries=(), reason="", since=c.now)
    elif knobs is None and r.phase in (CANARY, SOAKING, HALTED):
        c.rollout = dataclasses.replace(r, phase=IDLE, canaries=(), reason="", since=c.now)  # canary switched off
    return _PHASES[c.rollout.phase](c, snapshot=snapshot, knobs=knobs, target=target, facts=facts)


def _idle(c: _Change, *, snapshot: Snapshot, knobs: CanaryKnobs | None, target: Target, facts: GateFacts) -> Decision:
    r = c.rollout
    if settled(snapshot, target.digest):
        if r.good != target.digest or r.phase == PROCEEDING:
            good = dataclasses.replace(r, good=target.digest, good_version=target.version, good_driver=target.driver)
            if r.phase == PROCEEDING:
                c.rollout = good
                c.to(IDLE, f"every node runs driver {target.version}", canaries=(), reason="")
            else:
                c.rollout = dataclasses.replace(good, phase=IDLE)
        return c.decide()
    if r.phase == PROCEEDING or knobs is None or not r.good or target.digest == r.good:
        # No canary stage: none asked for, nothing good to return to yet, or not a change of spec.driver.
        return c.decide()
    canaries = pick(snapshot, knobs)
    if not canaries:
        return c.decide()
    c.to(CANARY, f"driver {target.version or target.digest} goes to canaries {', '.join(canaries)} first",
         target=target.digest, target_version=target.version, canaries=canaries, reason="", started=0.0)  # fmt: skip
    return _canary(c, snapshot=snapshot, knobs=knobs, target=target, facts=facts)


def _failure(node: NodeView | None, *, target: str, since: float) -> str:
    """Why a canary failed in this stage ("" if it did not). A node left failed by an earlier rollout is
    not this driver's failure: the upgrade machine tries it again (still cordoned) once admitted."""
    if node is None or node.state != m.FAILED:
        return ""
    d = node.driver
    failed_on_target = d is not None and d.in_sync and not d.orphan and d.spec_digest == target
    started = timer_starts(node.annotations, node.keys)
    if not failed_on_target and max(started, default=0.0) < since:
        return ""
    return node.annotations.get(node.keys.failure, "upgrade failed")


def _under_way(node: NodeView | None, digest: str) -> bool:
    """The canary's upgrade has begun: it left upgrade-required (or already runs the target)."""
    if node is None:
        return False
    return node.state not in (m.UNKNOWN, m.DONE, m.REQUIRED) or _on(node, digest)


def _where(node: NodeView | None) -> str:
    """Where a late canary is: its upgrade state and what its driver pod waits on."""
    if node is None:
        return "the node is gone"
    d = node.driver
    waiting = f", driver pod {d.waiting_reason}" if d is not None and d.waiting_reason else ""
    return f"{node.state or 'no upgrade state'}{waiting}"


def _halt(c: _Change, *, knobs: CanaryKnobs, why: str) -> Decision:
    r = c.rollout
    if knobs.auto_rollback and r.good_driver:
        c.to(ROLLING_BACK, f"rollout of driver {r.target_version} halted ({why}); canaries "
             f"{', '.join(r.canaries)} return to {r.good_version}", reason=why)  # fmt: skip
        return c.decide(allowed=frozenset(r.canaries), hold=f"rolling back: {why}")
    c.to(HALTED, f"rollout of driver {r.target_version} halted: {why}", reason=why)
    return c.decide(allowed=frozenset(), hold=f"rollout halted: {why}")


def _canary(c: _Change, *, snapshot: Snapshot, knobs: CanaryKnobs | None, target: Target, facts: GateFacts) -> Decision:
    assert knobs is not None
    r = c.rollout
    views = {n.name: n for n in snapshot.nodes}
    for name in r.canaries:
        why = _failure(views.get(name), target=target.digest, since=r.since)
        if why:
            return _halt(c, knobs=knobs, why=f"canary {name}: {why}")
    late = [n for n in r.canaries if not _on(views.get(n), target.digest)]
    if not r.started and any(_under_way(views.get(n), target.digest) for n in r.canaries):
        c.rollout = r = dataclasses.replace(r, started=c.now)
    if late and r.started and c.now - r.started >= knobs.timeout_seconds:
        return _halt(c, knobs=knobs, why=f"canary {late[0]} did not run driver {r.target_version} validated within "
                     f"{knobs.timeout_seconds:g} s ({_where(views.get(late[0]))})")  # fmt: skip
    if not late:
        c.to(SOAKING, f"canaries {', '.join(r.canaries)} run driver {r.target_version}: soaking "
             f"{knobs.soak_seconds:g} s", reason="")  # fmt: skip
        return _soaking(c, snapshot=snapshot, knobs=knobs, target=target, facts=facts)
    return c.decide(allowed=frozenset(r.canaries), hold=f"canary stage: {', '.join(r.canaries)} upgrade first")


def _gate_failures(c: _Change, *, snapshot: Snapshot, knobs: CanaryKnobs, target: Target, facts: GateFacts) -> str:
    views = {n.name: n for n in snapshot.nodes}
    for name in c.rollout.canaries:
        node = views.get(name)
        if node is None:
            continue  # a canary node removed from the cluster has nothing left to show
        if not _on(node, target.digest):
            why = _failure(node, target=target.digest, since=0.0)
            return f"canary {name}: {why or 'its driver pod is no longer Ready and up to date'}"
        if facts.validators.get(name) is False:
            return f"canary {name}: the validator pod is not Ready"
        if knobs.xid_gate and facts.xids.get(name):
            return f"canary {name}: {facts.xids[name]}"
        probe = facts.probes.get(name, "")
        if knobs.probe is not None and probe not in ("", PROBE_RUNNING, PROBE_SUCCEEDED):
            return f"canary {name}: probe Job {probe}"
    return ""


def _soaking(
    c: _Change, *, snapshot: Snapshot, knobs: CanaryKnobs | None, target: Target, facts: GateFacts
) -> Decision:
    assert knobs is not None
    r = c.rollout
    why = _gate_failures(c, snapshot=snapshot, knobs=knobs, target=target, facts=facts)
    present = {n.name for n in snapshot.nodes}
    if not why and not any(n in present for n in r.canaries):
        why = f"every canary ({', '.join(r.canaries)}) left the cluster during the soak"
    if why:
        return _halt(c, knobs=knobs, why=why)
    # A canary removed meanwhile (an autoscaler) has nothing left to show: its probe is not waited for.
    probes = tuple(n for n in r.canaries if n in present) if knobs.probe is not None else ()
    left = r.since + knobs.soak_seconds - snapshot.now
    hold = f"canary stage: {', '.join(r.canaries)} soaking"
    if left > 0:
        return c.decide(allowed=frozenset(r.canaries), hold=f"{hold}, {left:.0f} s left", probes=probes, wake_in=left)
    if knobs.exporter_gate:
        idle = [n for n in r.canaries if facts.exporter.get(n) is False]
        if idle:
            return _halt(c, knobs=knobs, why=f"canary {idle[0]}: the exporter pod is not Ready after the soak")
    waiting = [n for n in probes if facts.probes.get(n) != PROBE_SUCCEEDED]
    if waiting:
        return c.decide(allowed=frozenset(r.canaries), hold=f"{hold}: waiting for the probe Job on {waiting[0]}",
                        probes=probes)  # fmt: skip
    c.to(PROCEEDING, f"canaries {', '.join(r.canaries)} passed every gate: driver {r.target_version} goes to "
         "every node", reason="")  # fmt: skip
    return c.decide()


def _halted(c: _Change, *, snapshot: Snapshot, knobs: CanaryKnobs | None, target: Target, facts: GateFacts) -> Decision:
    return c.decide(allowed=frozenset(), hold=f"rollout halted: {c.rollout.reason}")


_PHASES = {
    IDLE: _idle,
    CANARY: _canary,
    SOAKING: _soaking,
    PROCEEDING: _idle,  # waits for every node to run the target, as between rollouts
    HALTED: _halted,
}
