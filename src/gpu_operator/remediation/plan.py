"""The remediation planner: ``plan(snapshot, settings) -> Plan``, pure (no I/O, no clock).

Per GPU node, from the XID signals newer than what the node has already answered:

- not in remediation: the strongest action its new XIDs map to starts one remediation (a storm of
  Events is one remediation), unless the circuit breaker is open (``limit`` nodes already in
  remediation, counting those entering in this pass: a Warning Event instead) or the settings say dry
  run (an Event saying what would be done, nothing else). Each breaker or dry-run Event is recorded
  once per new XID: the controller's own earlier Events say which signals were already reported;
- in remediation: a stronger action escalates it; drain and reboot evict the node's GPU pods, only
  while a maintenance window is open (a reboot is requested once they are gone); it ends (taint and
  annotations gone, an Event) after ``quiet_seconds`` without an XID (taint, drain), once the driver
  upgrade machine reloaded the driver (reset: state ``upgrade-done``, no request left) or once the
  node's bootID changed (reboot).

The state lives on the Node (``keys.REMEDIATION_*`` annotations and the remediation taint), so a
restarted operator continues where the last one stopped; a taint without state (or the reverse) is
repaired. Leaving remediation writes ``keys.REMEDIATION_HANDLED``: older XIDs never count again.
Remediation turned off, or dry run turned on, ends every remediation: the operator stops acting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.names import keys
from gpu_operator.names.pods import PodView
from gpu_operator.remediation import model as m
from gpu_operator.remediation.model import Event, NodeView, Plan, Settings, Signal, Snapshot, Step
from gpu_operator.upgrade.drivers import GPU_DRIVER_SELECTOR
from gpu_operator.upgrade.model import DONE as UPGRADE_DONE

ACTIVE_REQUEUE = 2.0  # seconds between passes while GPU pods are being evicted
SLOW_REQUEUE = 30.0  # a reset or a reboot in progress (the node's own changes wake the controller sooner)
WINDOW_RECHECK = 300.0  # at most this long asleep while drains wait for a maintenance window
TAINT_EFFECT = "NoSchedule"
DRAINING = ("drain", "reboot")


@dataclass
class _Pass:
    snapshot: Snapshot
    settings: Settings
    count: int  # nodes in remediation, those entering in this pass included
    waits: list[float]


def plan(snapshot: Snapshot, settings: Settings) -> Plan:
    """The steps of one pass (see the module docstring)."""
    signals: dict[str, list[Signal]] = {}
    for signal in snapshot.signals:
        signals.setdefault(signal.node, []).append(signal)
    state = _Pass(snapshot=snapshot, settings=settings, waits=[],
                  count=sum(1 for n in snapshot.nodes if n.annotations.get(keys.REMEDIATION_STATE)))  # fmt: skip
    steps = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        step = _node(node, signals.get(node.name, []), state)
        if step is not None and (step.changes_node or step.evict or step.event or step.waiting):
            steps.append(step)
    in_remediation = state.count - sum(1 for s in steps if s.annotations.get(keys.REMEDIATION_STATE, "x") is None)
    return Plan(steps=tuple(steps), in_remediation=in_remediation, requeue_after=min(state.waits, default=None))


def taints_with(node: NodeView, value: str | None) -> list[Mapping[str, str]]:
    """The node's taints with the remediation taint set to ``value`` (None: without it)."""
    kept = [t for t in node.taints if t.get("key") != keys.REMEDIATION_TAINT]
    if value is None:
        return kept
    return [*kept, {"key": keys.REMEDIATION_TAINT, "value": value, "effect": TAINT_EFFECT}]


def _strongest(signals: Iterable[Signal], settings: Settings) -> tuple[str, int] | None:
    """(action, XID) of the strongest action among ``signals`` (the newest XID among equals); None if none acts."""
    best: tuple[int, float, str, int] | None = None
    for s in signals:
        action = settings.action_for(s.xid)
        candidate = (m.strength(action), s.at, action, s.xid)
        if action != "none" and (best is None or candidate[:2] > best[:2]):
            best = candidate
    return None if best is None else (best[2], best[3])


def _node(node: NodeView, signals: Sequence[Signal], p: _Pass) -> Step | None:
    current = node.annotations.get(keys.REMEDIATION_STATE)
    if not current:
        if node.taint is not None:  # a taint left by a crash between the two writes of a release
            return Step(node=node.name, taints=tuple(taints_with(node, None)), waiting="stray remediation taint")
        if not p.settings.enabled:
            return None
        return _start(node, signals, p)
    if not p.settings.enabled or p.settings.dry_run:
        return _release(node, "remediation is disabled" if not p.settings.enabled else "dry run turned on", p)
    return _continue(node, current, signals, p)


def _fresh(node: NodeView, signals: Sequence[Signal], p: _Pass) -> list[Signal]:
    """The signals a node not in remediation has not answered: newer than its watermark and than the quiet
    period (an hour-old Event found by a fresh operator is no reason to act now)."""
    watermark = m.parse_stamp(node.annotations.get(keys.REMEDIATION_HANDLED)) or float("-inf")
    after = max(watermark, p.snapshot.now - p.settings.quiet_seconds)
    return [s for s in signals if s.at > after]


def _start(node: NodeView, signals: Sequence[Signal], p: _Pass) -> Step | None:
    fresh = _fresh(node, signals, p)
    chosen = _strongest(fresh, p.settings)
    if chosen is None:
        return None
    action, xid = chosen
    newest = max(s.at for s in fresh)
    if p.settings.dry_run:
        if _reported(node.name, m.DRY_RUN_REASON, p) >= newest:
            return None
        message = f"dry run: would {action} node {node.name} for XID {xid}"
        return Step(node=node.name, event=Event(reason=m.DRY_RUN_REASON, message=message), action=action, xid=xid,
                    dry_run=True)  # fmt: skip
    if p.count >= p.settings.limit:
        if _reported(node.name, m.BREAKER_REASON, p) >= newest:
            return Step(node=node.name, waiting="circuit breaker open", breaker=True)
        message = (f"circuit breaker open: {p.count} nodes already in remediation (maxNodes {p.settings.limit}); "
                   f"would {action} node {node.name} for XID {xid}")  # fmt: skip
        event = Event(reason=m.BREAKER_REASON, message=message, warning=True)
        return Step(node=node.name, event=event, action=action, xid=xid, breaker=True, waiting="circuit breaker open")
    if _effective(action, p.settings)[0] in DRAINING and not node.pods_known:
        # Beyond the pods read this pass: it would be drained blind (a reboot asked at once, pods inside).
        p.waits.append(ACTIVE_REQUEUE)
        return Step(node=node.name, waiting="its GPU pods are read on a later pass")
    p.count += 1
    return _enter(node, action, xid, p, previous=None)


def _reported(node: str, reason: str, p: _Pass) -> float:
    return max((n.at for n in p.snapshot.notes if n.node == node and n.reason == reason), default=float("-inf"))


def _effective(action: str, settings: Settings) -> tuple[str, str]:
    if action == "reset" and not settings.auto_upgrade:
        return "drain", "; driver auto-upgrade is off, so no driver reload can reset the GPU: draining instead"
    return action, ""


def _enter(node: NodeView, action: str, xid: int, p: _Pass, *, previous: str | None) -> Step:
    action, fallback = _effective(action, p.settings)
    now = p.snapshot.now
    wanted: dict[str, str | None] = {keys.REMEDIATION_STATE: action, keys.REMEDIATION_XID: str(xid),
                                     keys.REMEDIATION_SINCE: m.stamp(now)}  # fmt: skip
    detail = f"tainted {keys.REMEDIATION_TAINT}={action}:{TAINT_EFFECT}"
    if action == "reset":
        wanted[keys.UPGRADE_REQUESTED] = "true"
        detail += f"; driver reload requested ({keys.UPGRADE_REQUESTED}=true), which resets the GPUs"
    evict, waiting = _drain(node, p) if action in DRAINING else ((), "")
    if action in DRAINING:
        detail += f"; evicting {len(evict)} GPU pods" if evict else f"; {waiting}" if waiting else ""
    if action == "reboot":
        wanted[keys.REMEDIATION_BOOT_ID] = node.boot_id
        if _drained(node):  # no GPU pod to move first: ask at once
            wanted[keys.REMEDIATION_REBOOT_REQUESTED] = m.stamp(now)
            detail += f"; reboot requested ({keys.REMEDIATION_REBOOT_REQUESTED})"
        else:
            wanted[keys.REMEDIATION_REBOOT_REQUESTED] = None  # asked for once the GPU pods are gone
    how = f"escalated from {previous} to {action}" if previous else f"remediation {action}"
    message = f"{how} for XID {xid}: {detail}{fallback}"
    return Step(node=node.name, annotations=_changes(node, wanted), taints=tuple(taints_with(node, action)),
                evict=evict, event=Event(reason=m.EVENT_REASON, message=message, warning=True), action=action,
                xid=xid, waiting=waiting)  # fmt: skip


def _changes(node: NodeView, wanted: Mapping[str, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in wanted.items() if node.annotations.get(k) != v}


def _is_driver(pod: PodView) -> bool:
    return all(pod.labels.get(k) == v for k, v in GPU_DRIVER_SELECTOR.items())


def _gpu_pods(node: NodeView) -> list[PodView]:
    return [pod for pod in node.pods if pod.gpu and not pod.stays]


def _drained(node: NodeView) -> bool:
    return not _gpu_pods(node)


def _drain(node: NodeView, p: _Pass) -> tuple[tuple[str, ...], str]:
    """GPU pods to evict now, and why the node waits (on a window or on pods still terminating)."""
    pods = _gpu_pods(node)
    if not pods:
        return (), ""
    if not p.settings.window_open:
        if p.settings.window_opens is not None:
            p.waits.append(min(max(p.settings.window_opens - p.snapshot.now, 1.0), WINDOW_RECHECK))
        return (), f"{len(pods)} GPU pods stay until a maintenance window opens ({p.settings.window_wait})"
    p.waits.append(ACTIVE_REQUEUE)
    live = tuple(pod.key for pod in pods if not pod.terminating)
    return live, "" if live else f"waiting for {len(pods)} GPU pods to terminate"


def _continue(node: NodeView, current: str, signals: Sequence[Signal], p: _Pass) -> Step | None:
    since = m.parse_stamp(node.annotations.get(keys.REMEDIATION_SINCE)) or p.snapshot.now
    new = [s for s in signals if s.at > since]
    chosen = _strongest(new, p.settings)
    if chosen is not None and m.strength(_effective(chosen[0], p.settings)[0]) > m.strength(current):
        return _enter(node, chosen[0], chosen[1], p, previous=current)
    newest = max((s.at for s in new), default=since)
    if current in ("taint", "drain"):
        quiet_end = newest + p.settings.quiet_seconds
        if p.snapshot.now >= quiet_end:
            return _release(node, f"no XID for {int(p.settings.quiet_seconds)} s", p)
        p.waits.append(max(quiet_end - p.snapshot.now, 1.0))
    elif current == "reset":
        requested = node.annotations.get(keys.UPGRADE_REQUESTED) == "true"
        if node.upgrade_state == UPGRADE_DONE and not requested:
            # Only XIDs of the reloaded driver count: those of the old one while the reload waited for its
            # window or slot would ask for a second reload that nothing new calls for.
            reloaded = max((pod.created for pod in node.pods if _is_driver(pod)), default=since)
            new = [s for s in new if s.at > reloaded]
            if not new:
                return _release(node, "the driver was reloaded (GPU reset) and no XID came since", p)
            wanted = {keys.REMEDIATION_SINCE: m.stamp(p.snapshot.now), keys.UPGRADE_REQUESTED: "true"}
            message = f"XID {new[-1].xid} again since the reset began: driver reload requested again"
            return Step(node=node.name, annotations=_changes(node, wanted), action="reset", xid=new[-1].xid,
                        event=Event(reason=m.EVENT_REASON, message=message, warning=True))  # fmt: skip
        p.waits.append(SLOW_REQUEUE)
    elif current == "reboot":
        booted = node.annotations.get(keys.REMEDIATION_BOOT_ID, "")
        if node.boot_id and node.boot_id != booted:
            return _release(node, "the node rebooted (its bootID changed)", p)
        if keys.REMEDIATION_REBOOT_REQUESTED not in node.annotations and _drained(node):
            wanted = {keys.REMEDIATION_REBOOT_REQUESTED: m.stamp(p.snapshot.now)}
            message = f"GPU pods drained: reboot requested ({keys.REMEDIATION_REBOOT_REQUESTED})"
            return Step(node=node.name, annotations=wanted, event=Event(reason=m.EVENT_REASON, message=message),
                        taints=tuple(taints_with(node, current)) if node.taint != current else None)  # fmt: skip
        p.waits.append(SLOW_REQUEUE)
    repair = taints_with(node, current) if node.taint != current else None
    evict, waiting = _drain(node, p) if current in DRAINING else ((), "")
    if current in ("reset", "reboot") and not waiting:
        waiting = "waiting for the driver reload" if current == "reset" else "waiting for the node to reboot"
    return Step(node=node.name, taints=None if repair is None else tuple(repair), evict=evict, waiting=waiting)


def _release(node: NodeView, why: str, p: _Pass) -> Step:
    current = node.annotations.get(keys.REMEDIATION_STATE, "")
    wanted: dict[str, str | None] = dict.fromkeys(keys.REMEDIATION_ANNOTATIONS, None)
    if current == "reset" and node.upgrade_state != UPGRADE_DONE:
        wanted[keys.UPGRADE_REQUESTED] = None  # withdrawn, when not yet taken (remediation disabled)
    wanted[keys.REMEDIATION_HANDLED] = m.stamp(p.snapshot.now)
    message = f"remediation {current} ended: {why}; taint {keys.REMEDIATION_TAINT} removed"
    return Step(node=node.name, annotations=_changes(node, wanted), taints=tuple(taints_with(node, None)),
                event=Event(reason=m.EVENT_REASON, message=message))  # fmt: skip
