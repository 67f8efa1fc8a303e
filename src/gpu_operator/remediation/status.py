"""``status.remediation`` of the active ClusterPolicy: which nodes are in remediation, and who waits.

The remediation controller is its only writer (the reconciler's and the upgrade controller's merge
patches leave it alone). :func:`summary` is pure: from the nodes a pass read and the steps it applied it
says what the nodes carry now (each node in remediation with its action, XID, start and what it waits
for), which nodes with a new XID the circuit breaker holds back, and a one-line message. It is written
only when it changes, so a quiet cluster costs no status writes; with remediation off and no node in
remediation the field is removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.remediation.model import NodeView, Settings, Step

CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")
#: At most this many nodes are named in each list: a status must stay small when a cluster-wide fault
#: puts hundreds of nodes behind the breaker (the counts in the message stay exact).
LISTED = 50


def _after(node: NodeView, step: Step | None) -> dict[str, str]:
    """The node's remediation annotations once ``step`` is applied (None in a step removes one)."""
    annotations = dict(node.annotations)
    for key, value in (step.annotations if step else {}).items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return annotations


def summary(*, settings: Settings, nodes: Sequence[NodeView], steps: Sequence[Step]) -> dict[str, Any]:
    """What ``status.remediation`` says after a pass that read ``nodes`` and applied ``steps``."""
    by_node = {step.node: step for step in steps}
    active: list[dict[str, Any]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        step = by_node.get(node.name)
        annotations = _after(node, step)
        action = annotations.get(keys.REMEDIATION_STATE)
        if not action:
            continue
        entry: dict[str, Any] = {"name": node.name, "action": action}
        xid = annotations.get(keys.REMEDIATION_XID, "")
        if xid.isdigit():
            entry["xid"] = int(xid)
        if since := annotations.get(keys.REMEDIATION_SINCE):
            entry["since"] = since
        if step is not None and step.waiting:
            entry["waiting"] = step.waiting
        active.append(entry)
    held = sorted(step.node for step in steps if step.breaker)
    parts = [f"{len(active)} of at most {settings.limit} node(s) in remediation"]
    if held:
        parts.append(f"circuit breaker open: {len(held)} node(s) with a new XID held back")
    if settings.dry_run:
        parts.append("dry run: nothing is changed")
    if not settings.enabled:
        parts.append("remediation is disabled")
    out: dict[str, Any] = {
        "enabled": settings.enabled, "dryRun": settings.dry_run, "maxNodes": settings.limit,
        "nodes": active[:LISTED], "held": held[:LISTED], "message": "; ".join(parts),
    }  # fmt: skip
    return out


def current_of(policy: Mapping[str, Any]) -> dict[str, Any] | None:
    status = (policy.get("status") or {}).get("remediation")
    return dict(status) if isinstance(status, Mapping) else None


async def write_status(kube: Kube, *, policy: JSON, desired: Mapping[str, Any] | None) -> bool:
    """Merge-patch ``status.remediation`` when it differs (``desired`` None removes it)."""
    if current_of(policy) == (None if desired is None else dict(desired)):
        return False
    # A merge patch replaces lists whole and keeps keys it does not name: every key is always written.
    await kube.patch_status(*CLUSTER_POLICY, policy["metadata"]["name"], {"remediation": desired})
    return True
