"""What the remediation planner decides on: XID signals, node views, the settings, and the steps it returns.

All plain frozen data: :mod:`gpu_operator.remediation.collect` builds a :class:`Snapshot` from the
cluster (Nodes, their GPU pods, the device plugin's ``GpuUnhealthy`` Events and the controller's own
Events), :func:`gpu_operator.remediation.plan.plan` turns it into :class:`Step` objects, and
:mod:`gpu_operator.remediation.execute` applies them. Times are epoch seconds; annotations carry them
in RFC 3339 (:func:`stamp`, :func:`parse_stamp`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_operator.api.remediation import ACTIONS, Action
from gpu_operator.names import keys
from gpu_operator.names.pods import PodView

EVENT_REASON = "GpuRemediation"  # every Event this controller records on a Node
BREAKER_REASON = "GpuRemediationBreakerOpen"
DRY_RUN_REASON = "GpuRemediationDryRun"
OWN_REASONS = (EVENT_REASON, BREAKER_REASON, DRY_RUN_REASON)


def strength(action: str) -> int:
    """The rank of an action (none weakest, reboot strongest); unknown states rank as taint."""
    ranks: tuple[str, ...] = ACTIONS
    return ranks.index(action) if action in ranks else 1


def stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 time (``Z`` or an offset); None for none or a malformed one."""
    if not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


@dataclass(frozen=True, kw_only=True)
class Signal:
    """One ``GpuUnhealthy`` Event: an XID on a node, at a time."""

    node: str
    xid: int
    at: float


@dataclass(frozen=True, kw_only=True)
class Note:
    """One of the controller's own Events (breaker or dry run) about a node: when, and which reason."""

    node: str
    reason: str
    at: float


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """A GPU node as the planner sees it."""

    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)  # the remediation and upgrade annotations
    taints: tuple[Mapping[str, str], ...] = ()  # spec.taints as read
    boot_id: str = ""
    upgrade_state: str = ""  # the driver upgrade machine's state label
    pods: tuple[PodView, ...] = ()  # pods bound to the node
    pods_known: bool = True  # the pods were read this pass (a drain never acts on an unread list)

    @property
    def taint(self) -> str | None:
        """The remediation taint's value; None when the node does not carry it."""
        return next((t.get("value", "") for t in self.taints if t.get("key") == keys.REMEDIATION_TAINT), None)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """``spec.remediation`` resolved for one pass."""

    enabled: bool = False
    dry_run: bool = False
    limit: int = 1  # the circuit breaker: nodes in remediation at most
    quiet_seconds: float = 600.0
    table: Mapping[int, Action] = field(default_factory=dict)
    default_action: Action = "taint"
    auto_upgrade: bool = False  # the driver upgrade machine runs (a reset needs it)
    window_open: bool = True  # a maintenance window is open now (or there are none)
    window_wait: str = ""  # why drains wait, when no window is open
    window_opens: float | None = None  # when the next window opens

    def action_for(self, xid: int) -> Action:
        return self.table.get(xid, self.default_action)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    nodes: tuple[NodeView, ...]
    signals: tuple[Signal, ...] = ()
    notes: tuple[Note, ...] = ()
    now: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Event:
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, kw_only=True)
class Step:
    """What one pass does to one node: annotations to set (None removes), its new taint list (None: as
    read), GPU pods to evict and the Event to record."""

    node: str
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] | None = None
    evict: tuple[str, ...] = ()  # "namespace/name" of GPU pods to evict
    event: Event | None = None
    action: str = ""  # the action counted in the metrics ("" for none)
    xid: int | None = None
    dry_run: bool = False
    breaker: bool = False  # the breaker refused this node an action
    waiting: str = ""  # why the node did not move further

    @property
    def changes_node(self) -> bool:
        return bool(self.annotations) or self.taints is not None


@dataclass(frozen=True, kw_only=True)
class Plan:
    steps: tuple[Step, ...] = ()
    in_remediation: int = 0  # nodes in remediation after this plan
    requeue_after: float | None = None  # when to look again (None: on the next change)
