"""nv-ipam on the node without nv-ipam: a delegate's ``"ipam": {"type": "nv-ipam"}`` becomes ``host-local`` (pure).

Upstream's NAD IPAM config names pools with ``poolName`` (one, or two comma-separated: an IPv4 and an
IPv6 pool, two pools of one family are refused; absent: the network's name) and ``poolType``
(``ippool``, the default, or ``cidrpool``, case-insensitive). :func:`pools_of` lists the IPPools a conf needs and
:func:`with_pool_ipam` rewrites each such plugin's ``ipam`` to the real ``host-local`` plugin with
this node's block from each pool's ``status.allocations`` (the network operator writes them):

- ``ranges``: one range set per pool, the block as ``rangeStart``..``rangeEnd`` in the pool's
  ``subnet`` with its ``gateway``, split around the pool's exclusions and the gateway;
- ``routes``: the pool's ``routes`` through the gateway, and a default route when ``defaultGateway``;
- ``dataDir``: ``/var/lib/cni/nv-ipam``, and the conf's ``name`` becomes :data:`STORE` for every
  nv-ipam network: host-local keeps its reservations in ``<dataDir>/<name>``, one file per address, and
  one store is the only way every network on a pool shares its store whatever other pool a NAD pairs it
  with (``pool-a`` alone, ``pool-a,pool-6``): no two pods of the node get the same address of a pool
  (as upstream's per-pool allocation). Pools whose blocks overlap on a node (the same subnet) share
  those addresses on it: never one address twice, at most fewer for each.

So addresses are allocated and released by host-local, as for any host-local network. A pool that
does not exist, or has no block for this node yet, is a :class:`~.delegates.DelegateError` naming the
pool and the node. CIDRPools are not supported (an error says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_operator.agents.multus.delegates import DelegateError
from gpu_operator.api.network.ippool import ExcludeRange, free_ranges, parse_address, parse_network

JSON = dict[str, Any]
TYPE = "nv-ipam"
DATA_DIR = "/var/lib/cni/nv-ipam"
#: host-local's store (``<DATA_DIR>/<STORE>``), the conf ``name`` of every nv-ipam network on the node.
STORE = "nv-ipam"
IPPOOL, CIDRPOOL = "ippool", "cidrpool"


def _plugins(conf: JSON) -> list[JSON]:
    return [p for p in conf.get("plugins", [conf]) if isinstance(p, dict)]


def _nv_ipam(plugin: JSON) -> JSON | None:
    ipam = plugin.get("ipam")
    return ipam if isinstance(ipam, dict) and ipam.get("type") == TYPE else None


def pool_names(conf: JSON, ipam: Mapping[str, Any], *, where: str) -> list[str]:
    """The pools one nv-ipam ``ipam`` names (``poolName``, else the network's name), checked."""
    pool_type = str(ipam.get("poolType") or IPPOOL).lower()
    if pool_type == CIDRPOOL:
        raise DelegateError(f"{where}: ipam poolType cidrpool is not supported by this operator (IPPool only)")
    if pool_type != IPPOOL:
        raise DelegateError(f"{where}: ipam poolType {pool_type!r} is not one of {IPPOOL}, {CIDRPOOL}")
    text = str(ipam.get("poolName") or conf.get("name") or "")
    names = text.split(",")
    if not text or len(names) > 2 or any(not n.strip() for n in names):
        raise DelegateError(f"{where}: ipam poolName {text!r} must name one or two pools, comma-separated")
    out = [n.strip() for n in names]
    if len(out) == 2 and out[0] == out[1]:
        raise DelegateError(f"{where}: ipam poolName {text!r} names pool {out[0]} twice")
    return out


def pools_of(conf: JSON, *, where: str) -> list[str]:
    """Every IPPool the conf's nv-ipam plugins need, in order, once each."""
    out: list[str] = []
    for plugin in _plugins(conf):
        ipam = _nv_ipam(plugin)
        if ipam is not None:
            out.extend(n for n in pool_names(conf, ipam, where=where) if n not in out)
    return out


def _block(pool: Mapping[str, Any], *, node: str, where: str) -> tuple[list[JSON], list[JSON]]:
    """The pool's range set for ``node`` and its routes."""
    meta, spec = pool.get("metadata") or {}, pool.get("spec") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    mine = [a for a in (pool.get("status") or {}).get("allocations") or () if a.get("nodeName") == node]
    network = parse_network(spec.get("subnet"))
    if not mine:
        raise DelegateError(f"{where}: IPPool {name} has no block for node {node} in status.allocations "
                            "(the pool is full, its nodeSelector leaves the node out, or the network "
                            "operator has not allocated yet)")  # fmt: skip
    start, end = parse_address(mine[0].get("startIP")), parse_address(mine[0].get("endIP"))
    if network is None or start is None or end is None or start not in network or end not in network:
        raise DelegateError(f"{where}: IPPool {name}: the block of node {node} is not inside its subnet")
    gateway = spec.get("gateway") or None
    exclusions = [ExcludeRange(start_ip=str(e.get("startIP", "")), end_ip=str(e.get("endIP", "")))
                  for e in spec.get("exclusions") or ()]  # fmt: skip
    pieces = free_ranges(start=start, end=end, exclusions=exclusions, gateway=gateway)
    if not pieces:
        raise DelegateError(f"{where}: IPPool {name}: every address of the block of node {node} is excluded")
    ranges = [{"subnet": str(network), "rangeStart": str(a), "rangeEnd": str(b),
               **({"gateway": gateway} if gateway else {})} for a, b in pieces]  # fmt: skip
    routes: list[JSON] = [{"dst": r["dst"], **({"gw": gateway} if gateway else {})}
                          for r in spec.get("routes") or () if r.get("dst")]  # fmt: skip
    if spec.get("defaultGateway") and gateway:
        routes.append({"dst": "0.0.0.0/0" if network.version == 4 else "::/0", "gw": gateway})
    return ranges, routes


def with_pool_ipam(conf: JSON, *, pools: Mapping[str, Mapping[str, Any] | None], node: str, where: str) -> JSON:
    """``conf`` with each nv-ipam ``ipam`` rewritten to ``host-local`` (see the module docstring);
    ``pools``: each needed pool's object by name (None: it does not exist)."""
    names_used: list[str] = []
    for plugin in _plugins(conf):
        ipam = _nv_ipam(plugin)
        if ipam is None:
            continue
        names = pool_names(conf, ipam, where=where)
        if names_used and names != names_used:
            raise DelegateError(f"{where}: every nv-ipam plugin of one conflist must name the same pools")
        names_used = names
        range_sets: list[Any] = []
        routes: list[JSON] = []
        families: dict[int, str] = {}
        for name in names:
            pool = pools.get(name)
            if pool is None:
                raise DelegateError(f"{where}: IPPool {name} (ipam poolName) does not exist")
            network = parse_network((pool.get("spec") or {}).get("subnet"))
            if network is not None and network.version in families:
                raise DelegateError(f"{where}: ipam poolName names two IPv{network.version} pools "
                                    f"({families[network.version]}, {name}): one pool per IP family")  # fmt: skip
            if network is not None:
                families[network.version] = name
            ranges, pool_routes = _block(pool, node=node, where=where)
            range_sets.append(ranges)
            routes.extend(pool_routes)
        plugin["ipam"] = {"type": "host-local", "ranges": range_sets, "dataDir": DATA_DIR,
                          **({"routes": routes} if routes else {})}  # fmt: skip
    if names_used:
        conf["name"] = STORE
    return conf


__all__ = ["DATA_DIR", "STORE", "TYPE", "pool_names", "pools_of", "with_pool_ipam"]
