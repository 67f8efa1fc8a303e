"""nv-ipam's ``IPPool`` (``nv-ipam.nvidia.com/v1alpha1``, namespaced), field-compatible with upstream's.

A pool is a subnet cut into per-node blocks of ``perNodeBlockSize`` addresses; the network operator
writes which node holds which block to ``status.allocations`` (``render.network.ippools`` plans it)
and the multus agent hands a node's block to the ``host-local`` plugin. Blocks are laid out as
upstream lays them: block *i* starts at the subnet's address + 1 + *i* x size, and none reaches the
last address of the subnet.

The checks upstream's webhook makes are rules here, each naming its field (the subnet a CIDR, the
block size at least 2 and no larger than the subnet, the gateway an address inside the subnet,
exclusions inside the subnet and in order, routes CIDRs of the subnet's family, no default route
with ``defaultGateway``). CEL cannot parse addresses on every API server we support, so they run
offline (``gpu-operator validate``) and in the operator, which allocates nothing for an invalid pool.
Pure: the address helpers here are shared by the planner and the node agent.
"""

from __future__ import annotations

import ipaddress
from typing import ClassVar, Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, ObjectMeta, Rule, opt
from gpu_operator.api.corev1 import NodeSelector
from gpu_operator.api.k8srules import Int32

GROUP = "nv-ipam.nvidia.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "IPPool"
PLURAL = "ippools"
CRD_NAME = f"{PLURAL}.{GROUP}"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(text: str | None) -> Network | None:
    """The subnet ``text`` names (host bits allowed, as Go's ParseCIDR), or None when it is no CIDR."""
    if not text or "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def parse_address(text: str | None) -> Address | None:
    """The address ``text`` names, or None."""
    try:
        return ipaddress.ip_address(text or "")
    except ValueError:
        return None


def usable_count(network: Network) -> int:
    """Addresses blocks may use: all but the subnet's first and last (upstream's count)."""
    return max(network.num_addresses - 2, 0)


class ExcludeRange(ApiModel):
    """Addresses nv-ipam must not hand out, startIP to endIP inclusive."""

    start_ip: str = Field(alias="startIP", description="First excluded address.")
    end_ip: str = Field(alias="endIP", description="Last excluded address.")


class Route(ApiModel):
    """A static route through the pool's gateway."""

    dst: str = Field(description="Destination, in CIDR notation.")


def _subnet_ok(spec: IPPoolSpec) -> bool:
    return parse_network(spec.subnet) is not None


def _block_fits(spec: IPPoolSpec) -> bool:
    network = parse_network(spec.subnet)
    return network is None or spec.per_node_block_size < 2 or spec.per_node_block_size <= usable_count(network)


def _gateway_ok(spec: IPPoolSpec) -> bool:
    return not spec.gateway or parse_address(spec.gateway) is not None


def _gateway_inside(spec: IPPoolSpec) -> bool:
    network, gateway = parse_network(spec.subnet), parse_address(spec.gateway)
    return network is None or gateway is None or gateway in network


def _exclusions_ok(spec: IPPoolSpec) -> bool:
    network = parse_network(spec.subnet)
    if network is None:
        return True
    for e in spec.exclusions or ():
        start, end = parse_address(e.start_ip), parse_address(e.end_ip)
        if start is None or end is None or start not in network or end not in network or int(end) < int(start):
            return False
    return True


def _routes_ok(spec: IPPoolSpec) -> bool:
    network = parse_network(spec.subnet)
    for r in spec.routes or ():
        dst = parse_network(r.dst)
        if dst is None or (network is not None and dst.version != network.version):
            return False
    return True


def _no_default_route(spec: IPPoolSpec) -> bool:
    if not spec.default_gateway:
        return True
    return not any((dst := parse_network(r.dst)) is not None and dst.prefixlen == 0 for r in spec.routes or ())


def _default_needs_gateway(spec: IPPoolSpec) -> bool:
    return not spec.default_gateway or bool(spec.gateway)


class IPPoolSpec(ApiModel):
    """A subnet handed out to nodes in blocks of the same size."""

    rules = (
        Rule(cel=None, message="must be a subnet in CIDR notation, e.g. 192.168.0.0/24", check=_subnet_ok,
             field_path=".subnet"),
        Rule(cel=None, message="is larger than the number of addresses the subnet has (all but its first and last)",
             check=_block_fits, field_path=".perNodeBlockSize"),
        Rule(cel=None, message="must be an IP address", check=_gateway_ok, field_path=".gateway"),
        Rule(cel=None, message="must be inside the subnet", check=_gateway_inside, field_path=".gateway"),
        Rule(cel=None, message="each must have startIP and endIP inside the subnet, startIP <= endIP",
             check=_exclusions_ok, field_path=".exclusions"),
        Rule(cel=None, message="each dst must be a CIDR of the subnet's family (IPv4 or IPv6)", check=_routes_ok,
             field_path=".routes"),
        Rule(cel=None, message="a default route is not allowed when defaultGateway is true",
             check=_no_default_route, field_path=".routes"),
        Rule(cel=None, message="defaultGateway needs a gateway", check=_default_needs_gateway,
             field_path=".defaultGateway"),
    )  # fmt: skip

    subnet: str = Field(min_length=1, description="The pool's subnet, e.g. 192.168.0.0/16.")
    per_node_block_size: Int32 = Field(ge=2, description="Addresses each node gets (at least 2).")
    exclusions: list[ExcludeRange] | None = opt(description="Addresses never handed out.")
    gateway: str | None = opt(description="The pool's gateway (inside the subnet); never handed out.")
    node_selector: NodeSelector | None = opt(description="Nodes that get a block; absent: every node.")
    default_gateway: bool | None = opt(description="Add a default route through the gateway.")
    routes: list[Route] | None = opt(description="Static routes through the gateway.")


class Allocation(ApiModel):
    """The block one node holds."""

    node_name: str = Field(description="The node.")
    start_ip: str = Field(alias="startIP", description="First address of its block.")
    end_ip: str = Field(alias="endIP", description="Last address of its block.")


class IPPoolStatus(ApiModel):
    """Which node holds which block (the network operator writes it)."""

    allocations: list[Allocation] = Field(default_factory=list, description="One block per node.")


class IPPool(ApiModel):
    """An nv-ipam IP pool: a subnet cut into per-node blocks."""

    crd_plural: ClassVar[str] = PLURAL

    api_version: Literal["nv-ipam.nvidia.com/v1alpha1"] = Field(
        default="nv-ipam.nvidia.com/v1alpha1", alias="apiVersion"
    )
    kind: Literal["IPPool"] = "IPPool"
    metadata: ObjectMeta
    spec: IPPoolSpec = Field(description="The pool.")
    status: IPPoolStatus | None = None


def free_ranges(
    *, start: Address, end: Address, exclusions: list[ExcludeRange] | None, gateway: str | None
) -> list[tuple[Address, Address]]:
    """The addresses of block ``start``..``end`` nv-ipam may hand out, as inclusive ranges in order:
    the block minus the exclusions and the gateway."""
    cut: list[tuple[int, int]] = []
    for e in exclusions or ():
        low_ip, high_ip = parse_address(e.start_ip), parse_address(e.end_ip)
        if low_ip is not None and high_ip is not None and low_ip.version == start.version:
            cut.append((int(low_ip), int(high_ip)))
    gw = parse_address(gateway)
    if gw is not None and gw.version == start.version:
        cut.append((int(gw), int(gw)))
    out: list[tuple[int, int]] = []
    low, high = int(start), int(end)
    for first, last in sorted(cut):
        if last < low or first > high:
            continue
        if first > low:
            out.append((low, first - 1))
        low = max(low, last + 1)
    if low <= high:
        out.append((low, high))
    make = type(start)
    return [(make(a), make(b)) for a, b in out]


__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "Allocation",
    "ExcludeRange",
    "IPPool",
    "IPPoolSpec",
    "IPPoolStatus",
    "Route",
    "free_ranges",
    "parse_address",
    "parse_network",
    "usable_count",
]
