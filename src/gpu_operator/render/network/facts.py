"""What the Network Operator renderer reads about the cluster, and what it returns per state (pure).

Inputs: :class:`NicFacts`, the operator's namespace, the nodes reduced to name, labels and taints
(:func:`nic_node` builds one from a Node object) and this operator's agent image (a section naming an
image of the same repository runs our agent, ``gpu-operator agent NAME``, instead of upstream's
program). Output: one :class:`NetState` per state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE

JSON = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class NicNode:
    """A node as the renderer sees it: OFED pools come from its NFD labels, eligibility from its taints."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class NicFacts:
    namespace: str
    nodes: tuple[NicNode, ...] = ()
    agent_image: str = DEFAULT_AGENT_IMAGE  # the operator's AGENT_IMAGE


@dataclass(frozen=True, kw_only=True)
class NetState:
    """One state's desired objects. ``enabled`` False: the section is absent, prune the state's objects.

    ``error``: the state cannot be rendered as asked (its objects are left as they are); ``notes``:
    what an administrator should know although the state renders (NIC nodes left out of every pool).
    """

    name: str
    enabled: bool
    objects: tuple[JSON, ...] = ()
    daemonsets: tuple[str, ...] = ()
    deployments: tuple[str, ...] = ()
    error: str = ""
    notes: tuple[str, ...] = ()


def nic_node(obj: Mapping[str, Any]) -> NicNode:
    """A :class:`NicNode` from a Node object as the API returns it."""
    meta = obj.get("metadata") or {}
    taints = tuple(dict(t) for t in (obj.get("spec") or {}).get("taints") or ())
    return NicNode(name=str(meta.get("name", "")), labels=dict(meta.get("labels") or {}), taints=taints)
