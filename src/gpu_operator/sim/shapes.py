"""Node specs (``dgx-h100:2,cpu-only:1``) and node shapes made from the GPU catalog's profiles."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_operator.gpu.catalog import NODE_PROFILES, NodeProfile, node_profile
from gpu_operator.sim.objects import NodeShape


@dataclass(frozen=True, kw_only=True)
class NodeRequest:
    """``count`` nodes of one profile."""

    profile: str
    count: int


def parse_node_spec(spec: str) -> list[NodeRequest]:
    """``PROFILE[:COUNT],...`` (COUNT defaults to 1); unknown profiles are an error naming the known ones."""
    requests: list[NodeRequest] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, count_text = part.partition(":")
        if name not in NODE_PROFILES:
            raise ValueError(f"unknown node profile {name!r} in {spec!r}; known: {', '.join(sorted(NODE_PROFILES))}")
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise ValueError(f"bad node count {count_text!r} in {spec!r} (expected PROFILE:COUNT)") from None
        if count < 1:
            raise ValueError(f"node count must be at least 1 in {part!r}")
        requests.append(NodeRequest(profile=name, count=count))
    if not requests:
        raise ValueError("empty node spec: expected PROFILE[:COUNT],... e.g. dgx-h100:2,cpu-only:1")
    return requests


def shape_from_profile(profile: NodeProfile | str) -> NodeShape:
    chosen = node_profile(profile) if isinstance(profile, str) else profile
    return NodeShape(
        profile=chosen.name,
        gpu_count=chosen.gpu_count,
        cpu_cores=chosen.cpu_cores,
        memory_mib=chosen.memory_bytes // (1 << 20),
        os_id=chosen.os_id,
        os_version_id=chosen.os_version_id,
        kernel_version=chosen.kernel_version,
    )


def os_release(shape: NodeShape) -> str:
    """``/etc/os-release`` of the node's host root (agents that inspect the host read it)."""
    return (
        f'NAME="{shape.os_image.rsplit(" ", 1)[0]}"\nID={shape.os_id}\nVERSION_ID="{shape.os_version_id}"\n'
        f'PRETTY_NAME="{shape.os_image}"\n'
    )
