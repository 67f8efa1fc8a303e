"""Which NVIDIADriver owns which GPU node, and the node pools one driver DaemonSet serves each.

Routing (upstream ``AssignOwners``, reference §5): for each GPU node, the live non-default drivers
whose ``nodeSelector`` matches (none set means ``nvidia.com/gpu.present=true``) are candidates. One
candidate owns the node; none leaves it to the default driver; two or more is a conflict, and the
node keeps whatever owner label it has (fail closed, so a conflict never moves a node back and forth
between drivers). The result says which ``nvidia.com/gpu-operator.driver.owner`` labels to change.

Pools: a driver's nodes grouped by OS tag (and kernel, for precompiled drivers). Nodes without
NFD's OS labels cannot be put in a pool and are listed as skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpu_operator.api.nvidiadriver import OWNER_LABEL, NVIDIADriver
from gpu_operator.names.selectors import of_mapping
from gpu_operator.render.facts import GPU_PRESENT, MAJOR_ONLY_OS, OS_ID, OS_VERSION, OS_VERSION_MAJOR, NodeInfo
from gpu_operator.render.meta import fnv32a


def _meta(cr: NVIDIADriver, key: str) -> str:
    return str((cr.metadata.model_extra or {}).get(key) or "")


def live(cr: NVIDIADriver) -> bool:
    return not _meta(cr, "deletionTimestamp")


def selector_of(cr: NVIDIADriver) -> dict[str, str]:
    return dict(cr.spec.node_selector) if cr.spec.node_selector else {GPU_PRESENT: "true"}


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return of_mapping(selector).matches(labels)


@dataclass(frozen=True, kw_only=True)
class Routing:
    """Owners of GPU nodes, conflicts, and the owner-label patches that get there."""

    owners: Mapping[str, str] = field(default_factory=dict)
    conflicts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    label_changes: Mapping[str, str | None] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def nodes_of(self, driver: str) -> list[str]:
        return sorted(n for n, owner in self.owners.items() if owner == driver)

    def conflicts_of(self, driver: str) -> dict[str, tuple[str, ...]]:
        return {n: crs for n, crs in self.conflicts.items() if driver in crs}


def route_nodes(drivers: Sequence[NVIDIADriver], nodes: Sequence[NodeInfo]) -> Routing:
    live_drivers = [d for d in drivers if live(d)]
    defaults = sorted(
        (d for d in live_drivers if d.spec.default), key=lambda d: (_meta(d, "creationTimestamp"), d.metadata.name)
    )
    problems = []
    if len(defaults) > 1:
        names = ", ".join(d.metadata.name for d in defaults)
        problems.append(
            f"more than one default NVIDIADriver ({names}); the oldest, {defaults[0].metadata.name}, is used"
        )
    fallback = defaults[0].metadata.name if defaults else None
    candidates = [d for d in live_drivers if not d.spec.default]
    owners: dict[str, str] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    changes: dict[str, str | None] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        current = node.labels.get(OWNER_LABEL)
        if not node.gpu:
            if current is not None:
                changes[node.name] = None
            continue
        matching = sorted(d.metadata.name for d in candidates if matches(selector_of(d), node.labels))
        if len(matching) > 1:
            conflicts[node.name] = tuple(matching)
            if current:
                owners[node.name] = current  # fail closed: keep serving the node as it is
            continue
        owner = matching[0] if matching else fallback
        if owner is not None:
            owners[node.name] = owner
        if owner != current:
            changes[node.name] = owner
    return Routing(
        owners=MappingProxyType(owners),
        conflicts=MappingProxyType(conflicts),
        label_changes=MappingProxyType(changes),
        problems=tuple(problems),
    )


@dataclass(frozen=True, kw_only=True)
class DriverPool:
    """Nodes of one driver that share an OS (and kernel): one DaemonSet."""

    driver: str
    os_tag: str
    kernel: str | None
    nodes: tuple[str, ...]
    name: str
    node_selector: Mapping[str, str]


def pool_name(*, driver_type: str, os_tag: str, uid: str, kernel: str | None) -> str:
    """``nvidia-<driverType>-driver-<osTag>-<fnv32a(uid[-kernel])>``, at most 63 characters."""
    digest = f"{fnv32a((uid + (f'-{kernel}' if kernel else '')).encode()):08x}"
    prefix = f"nvidia-{driver_type}-driver-"
    room = 63 - len(prefix) - len(digest) - 1
    return f"{prefix}{os_tag[:room].rstrip('.-')}-{digest}"


def _os_selector(labels: Mapping[str, str]) -> dict[str, str]:
    os_id = labels[OS_ID]
    selector = {OS_ID: os_id}
    if os_id in MAJOR_ONLY_OS and labels.get(OS_VERSION_MAJOR):
        selector[OS_VERSION_MAJOR] = labels[OS_VERSION_MAJOR]
    else:
        selector[OS_VERSION] = labels.get(OS_VERSION, "")
    return selector


def pools_for(cr: NVIDIADriver, *, routing: Routing, nodes: Sequence[NodeInfo]) -> tuple[list[DriverPool], list[str]]:
    """The pools of one driver, and the names of its nodes skipped for lack of OS labels."""
    by_name = {n.name: n for n in nodes}
    precompiled = bool(cr.spec.use_precompiled)
    grouped: dict[tuple[str, str | None], list[NodeInfo]] = {}
    skipped = []
    for name in routing.nodes_of(cr.metadata.name):
        node = by_name[name]
        tag = node.os_tag
        if tag is None or (precompiled and node.kernel is None):
            skipped.append(name)
            continue
        grouped.setdefault((tag, node.kernel if precompiled else None), []).append(node)
    deploy = "vgpu-manager" if cr.spec.driver_type == "vgpu-host-manager" else "driver"
    uid = _meta(cr, "uid") or cr.metadata.name
    pools = []
    for (tag, kernel), members in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        selector = {
            f"nvidia.com/gpu.deploy.{deploy}": "true",
            OWNER_LABEL: cr.metadata.name,
            **(cr.spec.node_selector or {}),
            **_os_selector(members[0].labels),
        }
        if kernel is not None:
            selector["feature.node.kubernetes.io/kernel-version.full"] = kernel
        pools.append(
            DriverPool(
                driver=cr.metadata.name,
                os_tag=tag,
                kernel=kernel,
                nodes=tuple(n.name for n in members),
                name=pool_name(driver_type=cr.spec.driver_type, os_tag=tag, uid=uid, kernel=kernel),
                node_selector=MappingProxyType(selector),
            )
        )
    return pools, skipped
