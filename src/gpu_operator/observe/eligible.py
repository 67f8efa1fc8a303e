"""How many nodes a DaemonSet should run on, counted by the operator itself (pure).

A DaemonSet's status only says what its controller has worked out so far. On a large cluster the
controller can write ``desiredNumberScheduled: 0`` for a new DaemonSet before it has seen the node
labels the operator just set, and upstream's rule (nothing desired means ready) then calls the state
ready while not one pod exists. So the readiness check compares the controller's count with this one:
the nodes whose labels match the pod template's ``nodeSelector`` and whose ``NoSchedule`` and
``NoExecute`` taints the template tolerates, with the tolerations the DaemonSet controller adds to
every daemon pod. A template with node affinity is not counted (None: no check), since only the
controller evaluates that.

Every reconcile pass asks this of each operand DaemonSet, and at 5,000 nodes the eight counts were half of
a pass's CPU (issue 23's profile: 0.23 of 0.45 s), while between two passes neither the nodes nor the
templates' scheduling fields usually change. So the last count of each set of scheduling fields is kept with
the nodes it counted, and reused while the nodes compare equal (an informer's unchanged node is the same
object, so that comparison is one identity check per node).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_operator.names.selectors import tolerates

#: What the DaemonSet controller adds to every daemon pod (and network-unavailable for hostNetwork).
DAEMON_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
BLOCKING = ("NoSchedule", "NoExecute")
#: The nodes of the last counts (a tuple, compared to the next call's), and by scheduling fields each count.
#: One tuple, swapped whole, so operators in threads of one process only ever miss.
_counts: list[tuple[tuple[Mapping[str, Any], ...], dict[str, int]]] = [((), {})]


def eligible_nodes(daemonset: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> int | None:
    """How many of ``nodes`` should run a pod of ``daemonset``; None when that cannot be told here."""
    template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    if template.get("affinity") or template.get("nodeName"):
        return None
    selector = template.get("nodeSelector") or {}
    tolerations = [*(template.get("tolerations") or []), *DAEMON_TOLERATIONS]
    if template.get("hostNetwork"):
        tolerations.append(HOST_NETWORK_TOLERATION)
    counted, by_fields = _counts[0]
    listed = tuple(nodes)
    if listed != counted:
        by_fields = {}
    key = json.dumps([selector, tolerations], sort_keys=True)
    if key not in by_fields:
        by_fields = {**by_fields, key: _count(listed, selector=selector, tolerations=tolerations)}
    _counts[0] = (listed, by_fields)
    return by_fields[key]


def _count(
    nodes: Sequence[Mapping[str, Any]], *, selector: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]]
) -> int:
    count = 0
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in BLOCKING]
        if all(any(tolerates(tol, taint) for tol in tolerations) for taint in taints):
            count += 1
    return count
