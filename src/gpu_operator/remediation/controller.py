"""The remediation controller: one pass reads the cluster, plans and executes; its metrics.

A pass reads the active ClusterPolicy's ``spec.remediation`` and maintenance windows, the GPU nodes
(from the operator's cache) and the Node Events (from the operator's Event cache when it has one,
else one list), plans (:func:`gpu_operator.remediation.plan.plan`), applies the steps and writes
``status.remediation`` of the policy when it changed (:mod:`gpu_operator.remediation.status`). Nothing is
kept in memory between passes but the metrics: the state is on the Nodes and in the Events. With
remediation off and no node in remediation a pass reads nothing but the cached Nodes.

Metrics (on the operator's ``/metrics``):

- ``gpu_operator_remediation_actions_total{action,xid,dry_run}``: remediations started or escalated
  (``dry_run="true"``: those a dry run would have started);
- ``gpu_operator_remediation_breaker_open_total{action}``: nodes the circuit breaker refused an action;
- ``gpu_operator_remediation_nodes``: nodes in remediation now.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec, active_policy
from gpu_operator.api.remediation import DEFAULT_ACTION
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.remediation.collect import (
    EVENT_FIELDS,
    EVENT_NAMESPACE,
    read_nodes,
    settings_of,
    signals_and_notes,
)
from gpu_operator.remediation.execute import Applied, execute
from gpu_operator.remediation.model import Plan, Settings, Snapshot, Step
from gpu_operator.remediation.plan import plan
from gpu_operator.remediation.status import summary, write_status

log = logging.getLogger(__name__)
PREFIX = "gpu_operator_remediation_"


@dataclass
class RemediationMetrics:
    """Counters of what the controller did, rendered in Prometheus text."""

    actions: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (action, xid, dry_run)
    breaker_open: Counter[str] = field(default_factory=Counter)  # action -> refusals
    nodes: int = 0

    def record(self, steps: Sequence[Step], *, in_remediation: int) -> None:
        for step in steps:
            if step.event is None or not step.action:
                continue
            if step.breaker:
                self.breaker_open[step.action] += 1
            else:
                xid = "" if step.xid is None else str(step.xid)
                self.actions[(step.action, xid, "true" if step.dry_run else "false")] += 1
        self.nodes = in_remediation

    def lines(self) -> list[str]:
        name = f"{PREFIX}actions_total"
        out = [f"# HELP {name} Remediations started or escalated, by action and XID (dry_run: only recorded).",
               f"# TYPE {name} counter"]  # fmt: skip
        out += [f'{name}{{action="{a}",xid="{x}",dry_run="{d}"}} {n}' for (a, x, d), n in sorted(self.actions.items())]
        name = f"{PREFIX}breaker_open_total"
        out += [f"# HELP {name} Nodes the circuit breaker refused an action (maxNodes reached), by action.",
                f"# TYPE {name} counter"]  # fmt: skip
        out += [f'{name}{{action="{a}"}} {n}' for a, n in sorted(self.breaker_open.items())]
        name = f"{PREFIX}nodes"
        out += [f"# HELP {name} GPU nodes in remediation now.", f"# TYPE {name} gauge", f"{name} {self.nodes}"]
        return out


@dataclass(frozen=True, kw_only=True)
class RemediationOutcome:
    settings: Settings | None = None
    plan: Plan | None = None
    applied: Applied = field(default_factory=Applied)
    error: str = ""  # the policy's remediation settings could not be used

    @property
    def requeue_after(self) -> float | None:
        return None if self.plan is None else self.plan.requeue_after


async def _spec(kube: Kube) -> tuple[JSON | None, ClusterPolicySpec | str | None]:
    """The active policy and its spec (a string: why the spec cannot be used)."""
    policy = active_policy(await kube.list_objects("nvidia.com/v1", "ClusterPolicy"))
    if policy is None:
        return None, None
    try:
        return policy, ClusterPolicy.model_validate(policy).spec
    except ValidationError as error:
        return policy, f"ClusterPolicy spec.remediation or maintenanceWindows: {error}"


def _busy(node: JSON) -> bool:
    """Whether a node carries remediation state or its taint (a pass must look at it even when off)."""
    annotations = node["metadata"].get("annotations") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return keys.REMEDIATION_STATE in annotations or any(t.get("key") == keys.REMEDIATION_TAINT for t in taints)


async def remediation_pass(
    kube: Kube,
    *,
    now: float,
    metrics: RemediationMetrics,
    cached_events: Callable[[], Sequence[JSON] | None] = lambda: None,
) -> RemediationOutcome:
    """One pass (see the module docstring); ``cached_events`` answers the Node Events from a synced cache."""
    policy, spec = await _spec(kube)
    if isinstance(spec, str):
        log.error("remediation paused: %s", spec)
        return RemediationOutcome(error=spec)
    enabled = spec is not None and spec.remediation.enabled
    if not enabled and not any(_busy(n) for n in await kube.list_objects("v1", "Node")):
        metrics.nodes = 0
        if policy is not None:
            await write_status(kube, policy=policy, desired=None)  # nothing to say: no field at all
        return RemediationOutcome()
    events = cached_events()
    if events is None:
        events = await kube.list_objects("v1", "Event", namespace=EVENT_NAMESPACE, fields=_fields())
    signals, notes = signals_and_notes(events)
    quiet = float(spec.remediation.quiet_seconds) if spec is not None else 0.0
    acts, limit = _entry_bounds(spec)
    nodes, count = await read_nodes(kube, signals=signals, quiet_seconds=quiet, now=now, acts=acts, limit=limit)
    settings = settings_of(spec, gpu_nodes=count, now=now) if spec is not None else Settings()
    planned = plan(Snapshot(nodes=nodes, signals=signals, notes=notes, now=now), settings)
    applied = await execute(kube, planned.steps, nodes)
    metrics.record(applied.done, in_remediation=planned.in_remediation)
    if policy is not None:
        await write_status(kube, policy=policy, desired=summary(settings=settings, nodes=nodes, steps=applied.done))
    for step in planned.steps:
        if step.waiting:
            log.debug("remediation of node %s: %s", step.node, step.waiting)
    return RemediationOutcome(settings=settings, plan=planned, applied=applied)


def _entry_bounds(spec: ClusterPolicySpec | None) -> tuple[Callable[[int], bool], Callable[[int], int]]:
    """Whether an XID leads to an action, and how many nodes may enter remediation in one pass (a dry run
    and no policy: none), for reading only the pods a pass may drain."""
    if spec is None or spec.remediation.dry_run or not spec.remediation.enabled:
        return (lambda xid: False), (lambda gpu_nodes: 0)
    remediation, table = spec.remediation, spec.remediation.table()

    def acts(xid: int) -> bool:
        return table.get(xid, DEFAULT_ACTION) != "none"

    def limit(gpu_nodes: int) -> int:
        return remediation.node_limit(gpu_nodes=gpu_nodes)

    return acts, limit


def _fields() -> dict[str, str]:
    key, value = EVENT_FIELDS.split("=", 1)
    return {key: value}
