"""The pure remediation planner: what each pass leaves on the nodes, pass after pass.

Each test runs :func:`plan` on a snapshot, applies the steps to the node views (as the executor
would to the Nodes: annotations, taints, evicted pods gone) and asserts on the resulting node state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from gpu_operator.api.remediation import RemediationSpec
from gpu_operator.names import keys
from gpu_operator.names.pods import PodView
from gpu_operator.remediation import model as m
from gpu_operator.remediation.model import NodeView, Note, Plan, Settings, Signal, Snapshot
from gpu_operator.remediation.plan import plan

T0 = 1_800_000_000.0
TABLE = RemediationSpec().table()
ON = Settings(enabled=True, limit=1, quiet_seconds=600, table=TABLE, auto_upgrade=True)


def _gpu_pod(name: str, *, owner: str = "ReplicaSet") -> PodView:
    return PodView(namespace="work", name=name, gpu=True, owner_kind=owner)


def _node(
    name: str, *, pods: Sequence[PodView] = (), boot_id: str = "boot-1", annotations: Mapping[str, str] | None = None
) -> NodeView:
    return NodeView(name=name, pods=tuple(pods), boot_id=boot_id, annotations=dict(annotations or {}))


def _storm(node: str, xid: int, *, at: float = T0 - 10, count: int = 50) -> list[Signal]:
    return [Signal(node=node, xid=xid, at=at + i * 0.1) for i in range(count)]


def _apply(nodes: Iterable[NodeView], done: Plan) -> list[NodeView]:
    """The nodes after the executor applied ``done`` (evicted pods are gone)."""
    out = []
    for node in nodes:
        step = next((s for s in done.steps if s.node == node.name), None)
        if step is None:
            out.append(node)
            continue
        annotations = dict(node.annotations)
        for key, value in step.annotations.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        taints = node.taints if step.taints is None else step.taints
        pods = tuple(p for p in node.pods if p.key not in step.evict)
        out.append(dataclasses.replace(node, annotations=annotations, taints=taints, pods=pods))
    return out


def _events(done: Plan) -> list[tuple[str, str]]:
    return [(s.node, s.event.message) for s in done.steps if s.event is not None]


def _state(node: NodeView) -> str | None:
    return node.annotations.get(keys.REMEDIATION_STATE)


def test_an_xid_storm_on_one_node_is_one_remediation_of_the_strongest_action() -> None:
    nodes = [_node("a"), _node("b")]
    signals = [*_storm("a", 43), *_storm("a", 74), *_storm("a", 31)]  # app errors, and NVLink (drain)
    done = plan(Snapshot(nodes=tuple(nodes), signals=tuple(signals), now=T0), ON)
    after = _apply(nodes, done)
    assert _state(after[0]) == "drain"
    assert after[0].annotations[keys.REMEDIATION_XID] == "74"
    assert after[0].taint == "drain"
    assert after[1] == nodes[1]
    assert len(_events(done)) == 1
    assert "remediation drain for XID 74" in _events(done)[0][1]
    assert done.in_remediation == 1
    # The next pass, with the same storm still in the Events: nothing new.
    again = plan(Snapshot(nodes=tuple(after), signals=tuple(signals), now=T0 + 5), ON)
    assert _apply(after, again) == after
    assert _events(again) == []


def test_application_xids_do_nothing_and_unknown_xids_taint() -> None:
    nodes = [_node("a"), _node("b")]
    settings = dataclasses.replace(ON, limit=2)
    done = plan(Snapshot(nodes=tuple(nodes), signals=(*_storm("a", 13), *_storm("b", 999, count=1)), now=T0), settings)
    a, b = _apply(nodes, done)
    assert _state(a) is None
    assert a.taint is None
    assert _state(b) == "taint"
    assert b.taint == "taint"
    assert b.taints == ({"key": keys.REMEDIATION_TAINT, "value": "taint", "effect": "NoSchedule"},)


def test_drain_evicts_only_gpu_pods_inside_a_window_and_holds_them_outside() -> None:
    pods = [_gpu_pod("trainer"), PodView(namespace="work", name="web"), _gpu_pod("dp", owner="DaemonSet")]
    nodes = [_node("a", pods=pods)]
    closed = dataclasses.replace(ON, window_open=False, window_wait="the next window opens 02:00 UTC",
                                 window_opens=T0 + 240)  # fmt: skip
    done = plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 74)), now=T0), closed)
    (held,) = _apply(nodes, done)
    assert _state(held) == "drain"
    assert held.taint == "drain"
    assert {p.name for p in held.pods} == {"trainer", "web", "dp"}  # no eviction outside the window
    assert "until a maintenance window opens" in done.steps[0].waiting
    assert done.requeue_after == 240  # the controller looks again when the window opens
    opened = plan(Snapshot(nodes=(held,), signals=tuple(_storm("a", 74)), now=T0 + 240), ON)
    (drained,) = _apply([held], opened)
    assert {p.name for p in drained.pods} == {"web", "dp"}  # only the GPU pod that is not a DaemonSet's


def test_reset_asks_the_upgrade_machine_and_ends_when_the_driver_was_reloaded() -> None:
    nodes = [_node("a")]
    signals = tuple(_storm("a", 48))
    (node,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=signals, now=T0), ON))
    assert _state(node) == "reset"
    assert node.annotations[keys.UPGRADE_REQUESTED] == "true"
    assert node.taint == "reset"
    # The machine took the request (annotation gone) and is mid-upgrade: still in remediation.
    taken = {k: v for k, v in node.annotations.items() if k != keys.UPGRADE_REQUESTED}
    busy = dataclasses.replace(node, upgrade_state="pod-restart-required", annotations=taken)
    (busy_after,) = _apply([busy], plan(Snapshot(nodes=(busy,), signals=signals, now=T0 + 30), ON))
    assert _state(busy_after) == "reset"
    finished = dataclasses.replace(busy_after, upgrade_state="upgrade-done")
    done = plan(Snapshot(nodes=(finished,), signals=signals, now=T0 + 60), ON)
    (clear,) = _apply([finished], done)
    assert _state(clear) is None
    assert clear.taint is None
    assert keys.REMEDIATION_HANDLED in clear.annotations
    assert "driver was reloaded" in _events(done)[0][1]
    assert done.in_remediation == 0


def test_xids_of_the_old_driver_while_the_reset_waited_do_not_ask_for_a_second_reload() -> None:
    (node,) = _apply([_node("a")], plan(Snapshot(nodes=(_node("a"),), signals=tuple(_storm("a", 48)), now=T0), ON))
    taken = {k: v for k, v in node.annotations.items() if k != keys.UPGRADE_REQUESTED}
    driver = PodView(namespace="gpu-operator", name="nvidia-driver-x", owner_kind="DaemonSet", created=T0 + 100,
                     labels={"app.kubernetes.io/component": "nvidia-driver"})  # fmt: skip
    finished = dataclasses.replace(node, upgrade_state="upgrade-done", annotations=taken, pods=(driver,))
    # XIDs at T0+50 (the old driver, the reload still waiting) and none since the new driver pod (T0+100).
    waited = (*_storm("a", 48), *_storm("a", 48, at=T0 + 50, count=3))
    done = plan(Snapshot(nodes=(finished,), signals=waited, now=T0 + 160), ON)
    assert "driver was reloaded" in _events(done)[0][1]
    # An XID after the reload does ask again.
    again = plan(Snapshot(nodes=(finished,), signals=(*waited, *_storm("a", 48, at=T0 + 130, count=1)),
                          now=T0 + 160), ON)  # fmt: skip
    assert "requested again" in _events(again)[0][1]


def test_reset_falls_back_to_drain_when_driver_upgrades_are_off() -> None:
    nodes = [_node("a", pods=[_gpu_pod("trainer")])]
    done = plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 63)), now=T0),
                dataclasses.replace(ON, auto_upgrade=False))  # fmt: skip
    (node,) = _apply(nodes, done)
    assert _state(node) == "drain"
    assert keys.UPGRADE_REQUESTED not in node.annotations
    assert node.pods == ()
    assert "auto-upgrade is off" in _events(done)[0][1]


def test_reboot_requests_a_reboot_drains_and_ends_when_the_boot_id_changes() -> None:
    nodes = [_node("a", pods=[_gpu_pod("trainer")], boot_id="boot-1")]
    signals = tuple(_storm("a", 79))
    (draining,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=signals, now=T0), ON))
    assert _state(draining) == "reboot"
    assert draining.taint == "reboot"
    assert draining.pods == ()
    assert keys.REMEDIATION_REBOOT_REQUESTED not in draining.annotations  # not before the GPU pods are gone
    done = plan(Snapshot(nodes=(draining,), signals=signals, now=T0 + 2), ON)
    (node,) = _apply([draining], done)
    assert node.annotations[keys.REMEDIATION_REBOOT_REQUESTED] == m.stamp(T0 + 2)
    assert "GPU pods drained: reboot requested" in _events(done)[0][1]
    # Long past the quiet period, the node has not rebooted: it stays.
    (later,) = _apply([node], plan(Snapshot(nodes=(node,), signals=signals, now=T0 + 7200), ON))
    assert _state(later) == "reboot"
    rebooted = dataclasses.replace(later, boot_id="boot-2")
    (clear,) = _apply([rebooted], plan(Snapshot(nodes=(rebooted,), signals=signals, now=T0 + 7300), ON))
    assert _state(clear) is None
    assert clear.taint is None
    assert keys.REMEDIATION_REBOOT_REQUESTED not in clear.annotations


def test_taint_ends_after_the_quiet_period_and_a_new_xid_extends_it() -> None:
    nodes = [_node("a")]
    (node,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 999)), now=T0), ON))
    assert _state(node) == "taint"
    more = (*_storm("a", 999), Signal(node="a", xid=999, at=T0 + 500))
    (still,) = _apply([node], plan(Snapshot(nodes=(node,), signals=more, now=T0 + 700), ON))
    assert _state(still) == "taint"  # the XID at +500 restarted the quiet period
    done = plan(Snapshot(nodes=(still,), signals=more, now=T0 + 1100), ON)
    (clear,) = _apply([still], done)
    assert _state(clear) is None
    assert clear.taint is None
    # The old Events do not bring it back.
    assert _apply([clear], plan(Snapshot(nodes=(clear,), signals=more, now=T0 + 1105), ON)) == [clear]


def test_a_stronger_xid_escalates_a_node_in_remediation() -> None:
    nodes = [_node("a")]
    (node,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 999)), now=T0), ON))
    worse = (*_storm("a", 999), Signal(node="a", xid=79, at=T0 + 30))
    done = plan(Snapshot(nodes=(node,), signals=worse, now=T0 + 31), ON)
    (escalated,) = _apply([node], done)
    assert _state(escalated) == "reboot"
    assert escalated.taint == "reboot"
    assert "escalated from taint to reboot" in _events(done)[0][1]
    assert done.in_remediation == 1


def test_the_breaker_caps_a_cascade_at_max_nodes_and_reports_the_rest_once() -> None:
    nodes = [_node(f"n{i}") for i in range(5)]
    signals = tuple(s for i in range(5) for s in _storm(f"n{i}", 79, count=5))
    settings = dataclasses.replace(ON, limit=2)
    done = plan(Snapshot(nodes=tuple(nodes), signals=signals, now=T0), settings)
    after = _apply(nodes, done)
    assert [n.name for n in after if _state(n)] == ["n0", "n1"]
    assert all(n.taint is None for n in after[2:])
    breaker = [s for s in done.steps if s.breaker]
    assert [s.node for s in breaker] == ["n2", "n3", "n4"]
    assert all(s.event is not None and s.event.warning for s in breaker)
    assert "circuit breaker open: 2 nodes already in remediation" in breaker[0].event.message  # type: ignore[union-attr]
    # The breaker Events are on the cluster now: the next pass does not repeat them, nor act.
    notes = tuple(Note(node=s.node, reason=m.BREAKER_REASON, at=T0) for s in breaker)
    again = plan(Snapshot(nodes=tuple(after), signals=signals, notes=notes, now=T0 + 2), settings)
    assert _apply(after, again) == after
    assert _events(again) == []


def test_the_breaker_counts_nodes_already_in_remediation_with_a_percentage() -> None:
    spec = RemediationSpec.model_validate({"enabled": True, "maxNodes": "25%"})
    assert spec.node_limit(gpu_nodes=8) == 2
    assert spec.node_limit(gpu_nodes=2) == 1
    busy = _node("busy", annotations={keys.REMEDIATION_STATE: "reboot", keys.REMEDIATION_SINCE: m.stamp(T0 - 60),
                            keys.REMEDIATION_BOOT_ID: "boot-1"})  # fmt: skip
    nodes = [busy, _node("fresh")]
    done = plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("fresh", 79)), now=T0), ON)
    assert _state(_apply(nodes, done)[1]) is None
    assert [s.node for s in done.steps if s.breaker] == ["fresh"]


def test_dry_run_changes_no_node_and_reports_each_new_xid_once() -> None:
    nodes = [_node("a", pods=[_gpu_pod("trainer")]), _node("b")]
    signals = (*_storm("a", 79), *_storm("b", 48))
    settings = dataclasses.replace(ON, dry_run=True)
    done = plan(Snapshot(nodes=tuple(nodes), signals=signals, now=T0), settings)
    assert _apply(nodes, done) == nodes
    assert all(not s.changes_node and not s.evict and s.dry_run for s in done.steps)
    assert _events(done) == [("a", "dry run: would reboot node a for XID 79"),
                             ("b", "dry run: would reset node b for XID 48")]  # fmt: skip
    notes = tuple(Note(node=n, reason=m.DRY_RUN_REASON, at=T0) for n in ("a", "b"))
    assert plan(Snapshot(nodes=tuple(nodes), signals=signals, notes=notes, now=T0 + 1), settings).steps == ()


def test_stale_xids_are_ignored_and_disabling_releases_nodes() -> None:
    nodes = [_node("a")]
    old = tuple(_storm("a", 79, at=T0 - 3600))  # an hour-old storm found by a fresh operator
    assert plan(Snapshot(nodes=tuple(nodes), signals=old, now=T0), ON).steps == ()
    (node,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 999)), now=T0), ON))
    done = plan(Snapshot(nodes=(node,), signals=(), now=T0 + 1), dataclasses.replace(ON, enabled=False))
    (clear,) = _apply([node], done)
    assert _state(clear) is None
    assert clear.taint is None
    assert "remediation is disabled" in _events(done)[0][1]


def test_a_half_written_state_is_repaired() -> None:
    """A crash between the annotation and the taint write: the next pass finishes either way."""
    taints = ({"key": keys.REMEDIATION_TAINT, "value": "taint", "effect": "NoSchedule"},
              {"key": "other", "effect": "NoExecute"})  # fmt: skip
    stray = dataclasses.replace(_node("a"), taints=taints)
    (fixed,) = _apply([stray], plan(Snapshot(nodes=(stray,), now=T0), ON))
    assert fixed.taints == ({"key": "other", "effect": "NoExecute"},)
    untainted = _node("b", annotations={keys.REMEDIATION_STATE: "drain", keys.REMEDIATION_SINCE: m.stamp(T0)})
    (tainted,) = _apply([untainted], plan(Snapshot(nodes=(untainted,), now=T0 + 1), ON))
    assert tainted.taint == "drain"


def test_turning_dry_run_on_ends_the_remediations_under_way() -> None:
    nodes = [_node("a")]
    (node,) = _apply(nodes, plan(Snapshot(nodes=tuple(nodes), signals=tuple(_storm("a", 999)), now=T0), ON))
    assert _state(node) == "taint"
    dry = dataclasses.replace(ON, dry_run=True)
    done = plan(Snapshot(nodes=(node,), signals=tuple(_storm("a", 999)), now=T0 + 1), dry)
    (clear,) = _apply([node], done)
    assert _state(clear) is None
    assert clear.taint is None
    assert "dry run turned on" in _events(done)[0][1]


def test_a_node_whose_pods_were_not_read_is_never_drained_blind() -> None:
    """A reboot asks for the reboot at once when no GPU pod is seen: on a node whose pods this pass did not
    read, that would reboot under running work. It waits for a pass that read them."""
    unread = dataclasses.replace(_node("gpu-a", pods=[_gpu_pod("trainer")]), pods=(), pods_known=False)
    done = plan(Snapshot(nodes=(unread,), signals=tuple(_storm("gpu-a", 79)), now=T0), ON)
    (step,) = done.steps
    assert step.waiting == "its GPU pods are read on a later pass"
    assert not step.annotations
    assert step.taints is None
    assert step.event is None
    assert done.in_remediation == 0
    taint_only = plan(Snapshot(nodes=(unread,), signals=tuple(_storm("gpu-a", 999)), now=T0), ON)
    assert taint_only.steps[0].annotations[keys.REMEDIATION_STATE] == "taint"  # no drain: no pods needed
