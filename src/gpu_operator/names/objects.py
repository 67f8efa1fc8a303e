"""Accessors of API objects as plain dicts: the one JSON alias, conditions, Ready, labels, the owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def condition(obj: Mapping[str, Any], kind: str) -> JSON | None:
    """The ``status.conditions`` entry of type ``kind``, if any."""
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether the condition ``kind`` is there with status "True"."""
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def is_ready(obj: Mapping[str, Any]) -> bool:
    """A Node or Pod whose Ready condition is True."""
    return is_true(obj, "Ready")


def controller(obj: Mapping[str, Any]) -> JSON | None:
    """The owner reference marked ``controller`` (a pod's DaemonSet or ReplicaSet), if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None
