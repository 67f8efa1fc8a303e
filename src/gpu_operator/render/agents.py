"""The node agents the product's image runs (``gpu-operator agent NAME``), and the check that a rendered
state only names those.

The CLI's agent table (``cli/agent.py``) implements exactly these names (a unit test keeps the two
equal). A state whose pods would run an agent the image does not have is *refused*: it is rendered with
no objects and reported in the policy's status, never deployed with a command that cannot start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EXECUTABLE = "gpu-operator"
AGENTS = frozenset(
    {
        "sleep",
        "device-plugin",
        "feature-discovery",
        "exporter",
        "validator",
        "node-status-exporter",
        "toolkit",
        "mig-manager",
        "driver-manager",
        "driver",
        "nvidia-peermem",
        "gpu-discovery",
        "mps-control-daemon",
        "multus",
        "rdma-shared-dp",
        "sriov-dp",
        "nic-feature-discovery",
        "ofed-driver",
        "ofed-safe-load",
    }
)


def _pod_specs(obj: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    spec = obj.get("spec") or {}
    template = (spec.get("template") or {}).get("spec")
    if template:
        yield template
    if obj.get("kind") == "Pod":
        yield spec


def agents_named(objects: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every agent NAME in a ``gpu-operator agent NAME`` command of the objects' containers."""
    found: set[str] = set()
    for obj in objects:
        for pod in _pod_specs(obj):
            for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
                command = list(container.get("command") or [])
                if command[:2] == [EXECUTABLE, "agent"] and len(command) > 2:
                    found.add(str(command[2]))
    return found


def missing_agents(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """The agents the objects name that the image does not have, sorted."""
    return sorted(agents_named(objects) - AGENTS)
