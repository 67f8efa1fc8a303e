"""Node specs (``dgx-h100:2,cpu-only:1``) and node shapes made from the GPU catalog's profiles, with Mellanox
NICs and an OS pool of their own where a request asks (``nic_node_requests``: NIC nodes split over pools)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpu_operator.gpu.catalog import NODE_PROFILES, NodeProfile, node_profile
from gpu_operator.sim.nics import NIC_POOLS, NicRequest, OsPool
from gpu_operator.sim.objects import NodeShape


@dataclass(frozen=True, kw_only=True)
class NodeRequest:
    """``count`` nodes of one profile; with ``nics`` they carry Mellanox NICs, with ``os_pool`` that OS and kernel
    instead of the profile's."""

    profile: str
    count: int
    nics: NicRequest | None = None
    os_pool: OsPool | None = None

    @property
    def name_part(self) -> str:
        """What the nodes' names say: the profile, and the NIC model on NIC nodes (``cpu-only-cx7``)."""
        return f"{self.profile}-{self.nics.model}" if self.nics else self.profile


#: The most simulated nodes one profile may ask for: ten times the largest fleet the benchmarks run.
MAX_NODES = 50_000


def parse_node_spec(spec: str) -> list[NodeRequest]:
    """``PROFILE[:COUNT],...`` (COUNT defaults to 1); unknown profiles are an error naming the known ones."""
    requests: list[NodeRequest] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, count_text = part.partition(":")
        if name not in NODE_PROFILES:
            raise ValueError(f"unknown node profile {name!r} in {spec!r}; known: {', '.join(sorted(NODE_PROFILES))}")
        # ASCII digits only (int() also reads Arabic-Indic and fullwidth ones), bounded before anything is built.
        if count_text and not (count_text.isascii() and count_text.isdigit() and len(count_text) <= 6):
            raise ValueError(f"bad node count {count_text!r} in {spec!r} (expected PROFILE:COUNT)")
        count = int(count_text) if count_text else 1
        if not 1 <= count <= MAX_NODES:
            raise ValueError(f"node count must be from 1 to {MAX_NODES:,} in {part!r}")
        requests.append(NodeRequest(profile=name, count=count))
    if not requests:
        raise ValueError("empty node spec: expected PROFILE[:COUNT],... e.g. dgx-h100:2,cpu-only:1")
    return requests


def nic_node_requests(
    count: int,
    *,
    profile: str = "cpu-only",
    nics: NicRequest | None = None,
    pools: Sequence[OsPool] = NIC_POOLS,
) -> list[NodeRequest]:
    """``count`` NIC nodes of ``profile`` split evenly over ``pools`` (the first pools take the remainder);
    ``profile`` with GPUs gives GPU nodes that also have NICs."""
    if count < 1:
        raise ValueError(f"NIC node count must be at least 1, got {count}")
    if not pools:
        raise ValueError("at least one OS pool is needed")
    node_profile(profile)  # an unknown profile fails here, not half-way through registering
    chosen = nics or NicRequest()
    share, extra = divmod(count, len(pools))
    requests = []
    for index, pool in enumerate(pools):
        size = share + (1 if index < extra else 0)
        if size:
            requests.append(NodeRequest(profile=profile, count=size, nics=chosen, os_pool=pool))
    return requests


def shape_for(request: NodeRequest) -> NodeShape:
    """The shape of a node of ``request``: its profile's, with the request's NICs and OS pool."""
    shape = shape_from_profile(request.profile)
    if request.os_pool is not None:
        pool = request.os_pool
        shape = replace(shape, os_id=pool.os_id, os_version_id=pool.os_version_id, kernel_version=pool.kernel_version)
    if request.nics is not None:
        shape = replace(shape, nic_model=request.nics.model, nic_count=request.nics.count)
    return shape


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
