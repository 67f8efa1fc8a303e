"""How many nodes a DaemonSet should run on, counted by the operator itself (pure).

A DaemonSet's status only says what its controller has worked out so far. On a large cluster the
controller can write ``desiredNumberScheduled: 0`` for a new DaemonSet before it has seen the node
labels the operator just set, and upstream's rule (nothing desired means ready) then calls the state
ready while not one pod exists. So the readiness check compares the controller's count with this one:
the nodes whose labels match the pod template's ``nodeSelector`` and whose ``NoSchedule`` and
``NoExecute`` taints the template tolerates, with the tolerations the DaemonSet controller adds to
every daemon pod. A template with node affinity is not counted (None: no check), since only the
controller evaluates that.
"""

from __future__ import annotations

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


def eligible_nodes(daemonset: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> int | None:
    """How many of ``nodes`` should run a pod of ``daemonset``; None when that cannot be told here."""
    template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    if template.get("affinity") or template.get("nodeName"):
        return None
    selector = template.get("nodeSelector") or {}
    tolerations = [*(template.get("tolerations") or []), *DAEMON_TOLERATIONS]
    if template.get("hostNetwork"):
        tolerations.append(HOST_NETWORK_TOLERATION)
    count = 0
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in BLOCKING]
        if all(any(tolerates(tol, taint) for tol in tolerations) for taint in taints):
            count += 1
    return count
