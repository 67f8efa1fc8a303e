"""The API bodies every writer builds the same way: one Event, one Node merge patch, one eviction.

Pure functions of their arguments (no client): the operator's ``Kube``, the agents' node clients and
the simulator's REST client all send what these return, so an Event looks the same in ``kubectl
describe`` whoever recorded it, and the Eviction API's answers mean the same everywhere.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from enum import Enum
from typing import Any

JSON = dict[str, Any]
#: Events longer than this are truncated by us rather than refused by the API server.
MAX_EVENT_MESSAGE = 1024


class Eviction(Enum):
    """What the Eviction API answered for one pod."""

    EVICTED = "evicted"
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget does not allow it now
    GONE = "gone"  # 404: the pod is gone already


def eviction_outcome(code: int) -> Eviction | None:
    """The meaning of an Eviction API error status; None: a real error the caller raises."""
    return {429: Eviction.BLOCKED, 404: Eviction.GONE}.get(code)


def eviction_body(*, namespace: str, name: str) -> JSON:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}


def node_patch_body(
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    unschedulable: bool | None = None,
) -> JSON:
    """One merge patch of a Node (None values remove a label or annotation); {} when nothing changes."""
    body: JSON = {}
    if labels:
        body.setdefault("metadata", {})["labels"] = dict(labels)
    if annotations:
        body.setdefault("metadata", {})["annotations"] = dict(annotations)
    if unschedulable is not None:
        body["spec"] = {"unschedulable": unschedulable}
    return body


def event_body(
    *,
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    component: str,
    namespace: str,
    warning: bool = False,
    host: str | None = None,
    now: dt.datetime | None = None,
) -> JSON:
    """A ``v1`` Event about ``involved`` (an object, or at least its apiVersion, kind and metadata.name)."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = involved.get("metadata") or {}
    reference = {"apiVersion": involved["apiVersion"], "kind": involved["kind"], "name": meta["name"]}
    if meta.get("uid"):
        reference["uid"] = meta["uid"]
    if meta.get("namespace"):
        reference["namespace"] = meta["namespace"]
    source = {"component": component, **({"host": host} if host else {})}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
        "involvedObject": reference,
        "reason": reason,
        "message": message[:MAX_EVENT_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": source,
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
