"""Whether a DaemonSet is ready, by upstream's rules (``isDaemonSetReady``, reference §3.3).

Pure functions over the API's JSON: the reconciler passes the live DaemonSet, and for ``OnDelete``
DaemonSets (drivers) the pods it selects and its ControllerRevisions, because an OnDelete DaemonSet's
status counters do not say whether its pods run the current template:

- fewer pods desired than the nodes the operator counts for the DaemonSet (``observe.eligible``): not
  ready, the controller has not caught up (upstream misses this and calls such a state ready);
- ``desiredNumberScheduled == 0``: ready (no GPU node, nothing to wait for);
- ``numberUnavailable != 0``: not ready;
- ``RollingUpdate``: the controller observed the current generation, and every desired pod is
  updated and available;
- ``OnDelete``: every pod the DaemonSet owns carries the newest ControllerRevision's hash, is
  ``Running`` and has all containers ready.

Each answer carries a reason an administrator can act on ("2 of 3 pods available").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REVISION_HASH = "controller-revision-hash"


@dataclass(frozen=True, kw_only=True)
class Readiness:
    ready: bool
    reason: str = ""


def _int(status: Mapping[str, Any], key: str) -> int:
    return int(status.get(key) or 0)


def _owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    if not uid:
        return True  # no uid to compare with (offline input): the caller selected the pods
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def newest_revision_hash(name: str, revisions: Sequence[Mapping[str, Any]], *, uid: str | None = None) -> str | None:
    """The template hash of the DaemonSet's newest ControllerRevision (highest ``.revision``)."""
    owned = [r for r in revisions if _owned_by(r, uid)]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    meta = newest.get("metadata") or {}
    label = (meta.get("labels") or {}).get(REVISION_HASH)
    if label:
        return str(label)
    rev_name = str(meta.get("name", ""))
    return rev_name[len(name) + 1 :] if rev_name.startswith(f"{name}-") else rev_name or None


def _pod_problem(pod: Mapping[str, Any], expected: str | None) -> str | None:
    meta = pod.get("metadata") or {}
    name = meta.get("name", "?")
    if expected is not None and (meta.get("labels") or {}).get(REVISION_HASH) != expected:
        return f"pod {name} runs an old template (waiting for it to be replaced)"
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return f"pod {name} is {status.get('phase') or 'Pending'}"
    statuses = status.get("containerStatuses") or []
    if not statuses or not all(c.get("ready") for c in statuses):
        return f"pod {name} has containers that are not ready"
    return None


def daemonset_readiness(
    daemonset: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]] = (),
    revisions: Sequence[Mapping[str, Any]] = (),
    eligible: int | None = None,
) -> Readiness:
    """Readiness of one live DaemonSet (``pods``/``revisions`` are read only for OnDelete; ``eligible``:
    the nodes it should run on, as the operator counts them, None when not counted)."""
    meta = daemonset.get("metadata") or {}
    name = str(meta.get("name", "?"))
    status = daemonset.get("status") or {}
    desired = _int(status, "desiredNumberScheduled")
    if eligible is not None and desired < eligible:
        reason = f"{name}: the DaemonSet controller has scheduled {desired} of {eligible} nodes so far"
        return Readiness(ready=False, reason=reason)
    if desired == 0:
        return Readiness(ready=True, reason=f"{name}: no node selected")
    unavailable = _int(status, "numberUnavailable")
    if unavailable:
        return Readiness(ready=False, reason=f"{name}: {unavailable} of {desired} pods unavailable")
    strategy = ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy == "OnDelete":
        uid = meta.get("uid")
        expected = newest_revision_hash(name, revisions, uid=uid)
        owned = [p for p in pods if _owned_by(p, uid)]
        if not owned:
            return Readiness(ready=False, reason=f"{name}: no pods yet ({desired} desired)")
        for pod in sorted(owned, key=lambda p: str((p.get("metadata") or {}).get("name", ""))):
            problem = _pod_problem(pod, expected)
            if problem:
                return Readiness(ready=False, reason=f"{name}: {problem}")
        return Readiness(ready=True, reason=f"{name}: {len(owned)} pods ready")
    if _int(status, "observedGeneration") < _int(meta, "generation"):
        return Readiness(ready=False, reason=f"{name}: the controller has not observed the latest spec yet")
    updated, available = _int(status, "updatedNumberScheduled"), _int(status, "numberAvailable")
    if updated != desired:
        return Readiness(ready=False, reason=f"{name}: {updated} of {desired} pods updated")
    if available != desired:
        return Readiness(ready=False, reason=f"{name}: {available} of {desired} pods available")
    return Readiness(ready=True, reason=f"{name}: {desired} pods ready")


def state_readiness(
    daemonsets: Mapping[str, Mapping[str, Any] | None],
    *,
    pods: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    revisions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    eligible: Mapping[str, int | None] | None = None,
) -> Readiness:
    """A state is ready when all its DaemonSets are; None for a DaemonSet means "not created yet"."""
    reasons = []
    for name in sorted(daemonsets):
        live = daemonsets[name]
        if live is None:
            reasons.append(f"{name}: not created yet")
            continue
        result = daemonset_readiness(
            live,
            pods=(pods or {}).get(name, ()),
            revisions=(revisions or {}).get(name, ()),
            eligible=(eligible or {}).get(name),
        )
        if not result.ready:
            reasons.append(result.reason)
    return Readiness(ready=not reasons, reason="; ".join(reasons))
