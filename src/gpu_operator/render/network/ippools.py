"""Per-node blocks of nv-ipam IPPools (pure): pools and nodes in, each pool's ``status.allocations`` out.

:func:`plan_pool` decides who holds which block of one pool, with upstream's layout (block *i* is
``subnet + 1 + i*size`` .. ``+ size - 1``, none reaching the subnet's last address):

- **stable**: a node keeps the block its status names while the node exists, the pool's
  ``nodeSelector`` still selects it and the block is still one of the pool's (same size, aligned,
  inside the subnet, not another node's, not wholly excluded). Changing the subnet or the block size
  therefore moves every node, as upstream's reset does;
- **new nodes** (by name, in order) get the lowest free block;
- **exclusions**: a block whose every address is excluded (or is the gateway) is never handed out;
  a block partly excluded is handed out, and the node agent skips the excluded addresses
  (:func:`gpu_operator.api.network.ippool.free_ranges`);
- **too small**: nodes that got nothing are listed in :attr:`PoolPlan.unallocated` (the reconciler
  reports them); they get a block as soon as one frees up.

Node selection follows core/v1 ``NodeSelector``: terms ORed, requirements ANDed, ``matchExpressions``
on labels (In, NotIn, Exists, DoesNotExist, Gt, Lt), ``matchFields`` on ``metadata.name``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_operator.api.corev1 import NodeSelector, NodeSelectorRequirement
from gpu_operator.api.network.ippool import (
    Address,
    Allocation,
    IPPool,
    Network,
    free_ranges,
    parse_address,
    parse_network,
)
from gpu_operator.render.network.facts import NicNode


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """One pool's blocks: ``allocations`` (by node name), the selected nodes that got none."""

    pool: str
    allocations: tuple[Allocation, ...] = ()
    unallocated: tuple[str, ...] = ()

    def status(self) -> dict[str, list[dict[str, str]]]:
        """The pool's ``status`` as the API holds it."""
        return {"allocations": [a.model_dump(by_alias=True) for a in self.allocations]}


def _requirement(req: NodeSelectorRequirement, value: str | None) -> bool:
    values = req.values or []
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator == "In":
        return value is not None and value in values
    if req.operator == "NotIn":
        return value is None or value not in values
    if req.operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if req.operator == "Gt" else have < want
    return False


def selects(selector: NodeSelector | None, node: NicNode) -> bool:
    """Whether ``selector`` selects ``node`` (no selector: every node)."""
    if selector is None:
        return True
    for term in selector.node_selector_terms:
        expressions, fields = term.match_expressions or [], term.match_fields or []
        if not expressions and not fields:
            continue  # an empty term selects nothing, as in Kubernetes
        by_label = all(_requirement(r, node.labels.get(r.key)) for r in expressions)
        by_field = all(_requirement(r, node.name if r.key == "metadata.name" else None) for r in fields)
        if by_label and by_field:
            return True
    return False


def _block_count(network: Network, size: int) -> int:
    # Addresses first+1 .. last-1 are usable; the last block must end before the last address.
    return max((network.num_addresses - 2) // size, 0)


def _block_start(network: Network, size: int, index: int) -> Address:
    return network.network_address + 1 + index * size


def _usable(pool: IPPool, start: Address, size: int) -> bool:
    end = start + (size - 1)
    return bool(free_ranges(start=start, end=end, exclusions=pool.spec.exclusions, gateway=pool.spec.gateway))


def _index_of(allocation: Allocation, network: Network, size: int) -> int | None:
    """The block index an existing allocation names, or None when it is not one of the pool's blocks."""
    start, end = parse_address(allocation.start_ip), parse_address(allocation.end_ip)
    if start is None or end is None or start.version != network.version:
        return None
    offset = int(start) - int(network.network_address) - 1
    if offset < 0 or offset % size or int(end) - int(start) != size - 1:
        return None
    index = offset // size
    return index if index < _block_count(network, size) else None


def plan_pool(*, pool: IPPool, nodes: Sequence[NicNode]) -> PoolPlan:
    """Who holds which block of ``pool`` (see the module docstring); ``pool.status`` is what it was."""
    name = pool.metadata.name
    network = parse_network(pool.spec.subnet)
    size = pool.spec.per_node_block_size
    selected = sorted(n.name for n in nodes if selects(pool.spec.node_selector, n))
    if network is None:
        return PoolPlan(pool=name, unallocated=tuple(selected))
    wanted = set(selected)
    held: dict[str, int] = {}
    taken: set[int] = set()
    for existing in pool.status.allocations if pool.status is not None else ():
        index = _index_of(existing, network, size)
        node = existing.node_name
        if node not in wanted or node in held or index is None or index in taken:
            continue
        if not _usable(pool, _block_start(network, size, index), size):
            continue
        held[node] = index
        taken.add(index)
    unallocated: list[str] = []
    candidate = 0
    count = _block_count(network, size)
    for node in selected:
        if node in held:
            continue
        while candidate < count and (
            candidate in taken or not _usable(pool, _block_start(network, size, candidate), size)
        ):
            candidate += 1
        if candidate >= count:
            unallocated.append(node)
            continue
        held[node] = candidate
        taken.add(candidate)
    allocations = []
    for node in sorted(held):
        start = _block_start(network, size, held[node])
        allocations.append(Allocation(node_name=node, start_ip=str(start), end_ip=str(start + (size - 1))))
    return PoolPlan(pool=name, allocations=tuple(allocations), unallocated=tuple(unallocated))


__all__ = ["PoolPlan", "plan_pool", "selects"]
