"""Applying a remediation plan: the effects half of ``snapshot -> plan -> execute``.

Per node, in an order that keeps a crash harmless: first one merge patch of the Node's annotations
(the remediation state, the reboot or driver reload request), then the Event, then its taints (a JSON
patch that first tests the list it read, so another writer's taint is never lost: the API server
answers 422 and the next pass reads again), then evictions through the Eviction API (a
PodDisruptionBudget answers 429 and the pod stays until a later pass). A crash between the two node writes leaves
state without taint or a taint without state; the planner repairs either on the next pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_operator.kube.api import Kube
from gpu_operator.kube.objects import Eviction
from gpu_operator.remediation.collect import EVENT_NAMESPACE
from gpu_operator.remediation.model import NodeView, Step

log = logging.getLogger(__name__)
PARALLEL_NODES = 16


@dataclass
class Applied:
    """What executing one plan did."""

    patched: int = 0
    evicted: int = 0
    blocked: list[str] = field(default_factory=list)  # pods whose eviction a budget refused
    events: int = 0
    errors: list[str] = field(default_factory=list)
    done: list[Step] = field(default_factory=list)  # steps whose state and Event were recorded


def taint_patch(read: Sequence[object], new: Sequence[object]) -> list[dict[str, object]]:
    """JSON patch operations replacing the taint list ``read`` with ``new``."""
    if not read:
        # "add" replaces a member that exists: the test (null: absent) keeps a taint another writer added
        # since the read (the node controller's unreachable taint, an autoscaler's) from being overwritten.
        return [{"op": "test", "path": "/spec/taints", "value": None},
                {"op": "add", "path": "/spec/taints", "value": list(new)}]  # fmt: skip
    return [{"op": "test", "path": "/spec/taints", "value": list(read)},
            {"op": "replace", "path": "/spec/taints", "value": list(new)}]  # fmt: skip


async def apply_step(kube: Kube, step: Step, node: NodeView, applied: Applied) -> None:
    if step.annotations:
        await kube.patch("v1", "Node", step.node, {"metadata": {"annotations": dict(step.annotations)}})
        applied.patched += 1
    # The state is on the Node now: its Event (and metric) is recorded before the taint and the evictions,
    # whose conflicts (422, a budget's 429) the next pass repairs without a second Event.
    if step.event is not None:
        involved = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": step.node}}
        await kube.event(involved=involved, reason=step.event.reason, message=step.event.message,
                         warning=step.event.warning, namespace=EVENT_NAMESPACE)  # fmt: skip
        applied.events += 1
    applied.done.append(step)
    if step.taints is not None and list(step.taints) != list(node.taints):
        await kube.json_patch("v1", "Node", step.node, taint_patch(node.taints, step.taints))
        applied.patched += 1
    for key in step.evict:
        namespace, name = key.split("/", 1)
        outcome = await kube.evict(namespace=namespace, name=name)
        if outcome is Eviction.BLOCKED:
            applied.blocked.append(key)
        elif outcome is Eviction.EVICTED:
            applied.evicted += 1


async def execute(kube: Kube, steps: Sequence[Step], nodes: Sequence[NodeView]) -> Applied:
    """Apply every step; one node's failure is logged and reported, the others go on."""
    applied = Applied()
    by_name = {n.name: n for n in nodes}
    limit = asyncio.Semaphore(PARALLEL_NODES)

    async def one(step: Step) -> None:
        async with limit:
            try:
                await apply_step(kube, step, by_name.get(step.node, NodeView(name=step.node)), applied)
            except Exception as error:  # the next pass retries from the cluster's state
                log.warning("remediation of node %s: %s", step.node, error)
                applied.errors.append(f"{step.node}: {error}")

    await asyncio.gather(*(one(s) for s in steps))
    return applied
