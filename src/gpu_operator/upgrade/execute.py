"""Applying a plan: the effects half of ``snapshot -> plan -> execute``.

Per node, in an order that keeps every crash harmless: first one merge patch of the Node carrying the
new state label, the annotations and the cordon together (so no state is ever recorded without its
cordon, or the reverse); then evictions through the Eviction API (a PodDisruptionBudget answers 429
and the pod stays until a later pass or the timeout); then the driver pod's deletion (its OnDelete
DaemonSet recreates it from the new template); then one Event naming the transitions (reason
``GPUDriverUpgrade``, or ``OFEDDriverUpgrade`` for the Network Operator's driver: the plan's keys
say). A node seen for the first time with an up-to-date driver is labelled ``upgrade-done`` without
an Event: nothing happened to it, and on a new cluster that would be one Event per node. Failures on
one node are logged and reported; the next pass retries from the cluster's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.objects import Eviction, node_patch_body
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import EVENT_REASON
from gpu_operator.upgrade.plan import Plan
from gpu_operator.upgrade.steps import Step

log = logging.getLogger(__name__)
PARALLEL_NODES = 16  # nodes whose steps are applied at once
EVENT_NAMESPACE = "default"  # Node events live there, where `kubectl describe node` finds them


@dataclass
class Applied:
    """What executing one plan did."""

    patched: int = 0
    evicted: int = 0
    blocked: list[str] = field(default_factory=list)  # pods whose eviction a budget refused
    deleted: int = 0
    errors: list[str] = field(default_factory=list)


def noteworthy(step: Step) -> bool:
    """Whether the step's transitions deserve an Event: all but a first sight (no state -> done)."""
    return bool(step.transitions) and [(t[0], t[1]) for t in step.transitions] != [(m.UNKNOWN, m.DONE)]


def node_patch(step: Step) -> dict[str, Any]:
    return node_patch_body(labels=step.labels, annotations=step.annotations, unschedulable=step.unschedulable)


async def _event(kube: Kube, step: Step, *, reason: str) -> None:
    path = " -> ".join([step.transitions[0][0] or "(none)", *(t[1] for t in step.transitions)])
    message = f"{path}: {step.transitions[-1][2]}"
    involved = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": step.node}}
    await kube.event(involved=involved, reason=reason, message=message, warning=step.failed, namespace=EVENT_NAMESPACE)


async def apply_step(kube: Kube, step: Step, applied: Applied, *, reason: str = EVENT_REASON) -> None:
    body = node_patch(step)
    if body:
        await kube.patch("v1", "Node", step.node, body)
        applied.patched += 1
    for key in step.evict:
        namespace, name = key.split("/", 1)
        outcome = await kube.evict(namespace=namespace, name=name)
        if outcome is Eviction.BLOCKED:
            applied.blocked.append(key)
        elif outcome is Eviction.EVICTED:
            applied.evicted += 1
    if step.delete_driver:
        namespace, name = step.delete_driver.split("/", 1)
        if await kube.delete("v1", "Pod", name, namespace=namespace):
            applied.deleted += 1
    for key in step.restart:
        namespace, name = key.split("/", 1)
        await kube.delete("v1", "Pod", name, namespace=namespace)
    if noteworthy(step):
        await _event(kube, step, reason=reason)


async def execute(kube: Kube, plan: Plan | Sequence[Step], *, reason: str | None = None) -> Applied:
    """Apply every acting step; Events carry ``reason``, by default the plan's driver's (GPU for bare steps)."""
    applied = Applied()
    steps = plan.steps if isinstance(plan, Plan) else plan
    if reason is None:
        reason = plan.keys.event_reason if isinstance(plan, Plan) else EVENT_REASON
    # Nodes are independent: their steps run concurrently (each node's own effects stay in order).
    limit = asyncio.Semaphore(PARALLEL_NODES)

    async def one(step: Step) -> None:
        async with limit:
            try:
                await apply_step(kube, step, applied, reason=reason)
            except Exception as error:  # one node's failure (API, network) must not stop the others' steps
                log.warning("driver upgrade of node %s: %s", step.node, error)
                applied.errors.append(f"{step.node}: {error}")

    await asyncio.gather(*(one(step) for step in steps if step.acts))
    return applied
