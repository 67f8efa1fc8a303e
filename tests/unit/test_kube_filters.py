"""The Node-watch filter (heartbeats dropped, what a pass reads kept) and the applied-hash helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node

from gpu_operator.kube.api import applied_hash, changed_nodes, with_applied_hash

pytestmark = pytest.mark.unit


def _node(*, labels: dict[str, str] | None = None, ready: str = "True", beat: int = 1, cordon: bool = False) -> Node:
    condition = {"type": "Ready", "status": ready, "lastHeartbeatTime": f"2026-11-30T1{beat}:00:00Z"}
    node: Node = Node.from_dict({  # type: ignore[assignment]
        "metadata": {"name": "n1", "labels": labels or {}},
        "spec": {"unschedulable": cordon},
        "status": {"conditions": [condition]},
    })  # fmt: skip
    return node


async def _collect(events: list[tuple[str, Any]]) -> list[str]:
    async def stream() -> AsyncIterator[tuple[str, Any]]:
        for event in events:
            yield event

    return [kind async for kind, _ in changed_nodes(stream())]


def test_heartbeats_are_dropped_and_changes_kept() -> None:
    events = [
        ("ADDED", _node()),
        ("MODIFIED", _node(beat=2)),  # heartbeat only: dropped
        ("MODIFIED", _node(beat=3, labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"})),
        ("MODIFIED", _node(beat=4, labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}, ready="False")),
        (
            "MODIFIED",
            _node(beat=5, labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}, ready="False", cordon=True),
        ),
        ("DELETED", _node()),
    ]
    assert asyncio.run(_collect(events)) == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]


def test_applied_hash_is_stable_and_changes_with_the_object() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}
    first, again = with_applied_hash(obj), with_applied_hash(dict(reversed(list(obj.items()))))
    assert applied_hash(first) == applied_hash(again) is not None
    assert applied_hash(with_applied_hash({**obj, "data": {"k": "w"}})) != applied_hash(first)
    assert applied_hash(obj) is None
