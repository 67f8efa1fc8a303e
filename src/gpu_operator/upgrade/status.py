"""``status.driverUpgrade`` of the ClusterPolicy and of each NVIDIADriver: upgrade progress per policy.

The upgrade controller is the only writer of this field (the reconcilers write state and conditions
with merge patches that leave it alone). It says whether auto-upgrade is on, how many managed nodes
are in each upgrade state, and a one-line summary naming the first failed node and why (and, while
nodes wait for a maintenance window, when the next one opens). It is written
only when it changes, so a steady cluster costs no status writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Knobs
from gpu_operator.upgrade.plan import WINDOW_CLOSED, Plan


@dataclass(frozen=True, kw_only=True)
class StatusOwner:
    """The policy object a partition's status goes to, and what its status says now."""

    api_version: str
    kind: str
    name: str
    current: Mapping[str, Any] | None
    behind: bool = False  # its spec is newer than the one the reconciler last applied (``applied_behind``)


def summary(
    *, knobs: Knobs, counts: Mapping[str, int], plan: Plan | None, canary: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    nodes = {state: n for state, n in sorted(counts.items()) if state and n}
    if not knobs.auto_upgrade:
        return {"autoUpgrade": False, "nodes": {}, "message": "automatic driver upgrades are off"}
    busy = sum(n for s, n in nodes.items() if s not in (m.DONE, m.REQUIRED, m.FAILED))
    parts = [f"{busy} upgrading", f"{nodes.get(m.DONE, 0)} done"]
    if nodes.get(m.REQUIRED):
        parts.append(f"{nodes[m.REQUIRED]} waiting")
    if nodes.get(m.FAILED):
        parts.append(f"{nodes[m.FAILED]} failed")
    message = ", ".join(parts) + f" of {sum(nodes.values())} node(s)"
    failed = next((s for s in plan.steps if s.after == m.FAILED and s.waiting), None) if plan else None
    if failed is not None:
        message += f"; {failed.node}: {failed.waiting}"
    windowed = next((s for s in plan.steps if s.waiting.startswith(WINDOW_CLOSED)), None) if plan else None
    if windowed is not None:  # say why the waiting nodes wait, and until when
        message += f"; {windowed.waiting}"
    held = next((s for s in plan.steps if s.waiting == knobs.admit_hold), None) if plan and knobs.admit_hold else None
    if held is not None:  # the canary stage holds the other nodes: say why
        message += f"; {held.waiting}"
    out = {"autoUpgrade": True, "nodes": nodes, "message": message[:1024]}
    if canary:
        out["canary"] = dict(canary)
    return out


async def write_status(kube: Kube, *, owner: StatusOwner, desired: Mapping[str, Any]) -> bool:
    """Merge-patch ``status.driverUpgrade`` when it differs; states no longer present are removed."""
    current = dict(owner.current or {})
    if current == dict(desired):
        return False
    body = dict(desired)
    stale = set(current.get("nodes") or {}) - set(desired.get("nodes") or {})
    body["nodes"] = {**dict.fromkeys(stale), **(desired.get("nodes") or {})}
    if "canary" in current and "canary" not in desired:
        body["canary"] = None  # a merge patch keeps what it does not name
    await kube.patch_status(owner.api_version, owner.kind, owner.name, {"driverUpgrade": body})
    return True
