"""Matching discovered functions against a resource's selectors, and building the pools (pure).

Each field of a selector object filters as upstream's selector of that name does: exact string
matches for ``vendors``, ``devices`` (PCI device IDs, lower-case hex without ``0x``), ``drivers``,
``pciAddresses`` and ``linkTypes`` (``ether``, ``infiniband``); ``pfNames`` matches a VF by its PF's
interface name (case-insensitively, as upstream) and ``rootDevices`` by its PF's PCI address, both
optionally narrowed to VF indices (``ens1f0#0-3,7``) — neither ever matches a function that is not a
VF; ``isRdma`` keeps only functions with an RDMA device. A resource's pool is the union over its
selector objects; a device already in an earlier resource's pool is not added again (upstream's
"already allocated" rule), so the order of ``resourceList`` decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_operator.agents.sriovdp.config import Config, ResourceConfig, Selector, parse_vf_range
from gpu_operator.agents.sriovdp.discovery import Candidate


@dataclass(frozen=True, kw_only=True)
class Pool:
    """One resource and the devices it advertises (each with the selector object that chose it)."""

    resource: ResourceConfig
    devices: tuple[tuple[Candidate, Selector], ...]

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(candidate.address for candidate, _ in self.devices)


def _vf_selected(entries: Sequence[str], *, key: str, vf_index: int) -> bool:
    """The first entry naming ``key`` (case-insensitively, as upstream) decides, by its VF range if any."""
    for entry in entries:
        name, ranges = parse_vf_range(entry)
        if name.lower() == key.lower():
            return not ranges or any(start <= vf_index <= end for start, end in ranges)
    return False


def matches(candidate: Candidate, selector: Selector) -> bool:
    """Whether ``candidate`` passes every non-empty field of ``selector``."""
    function = candidate.function
    plain = (
        (selector.vendors, function.vendor),
        (selector.devices, function.device),
        (selector.drivers, function.driver),
        (selector.pci_addresses, function.address),
        (selector.link_types, candidate.link_type),
    )
    if any(wanted and value not in wanted for wanted, value in plain):
        return False
    if selector.pf_names and not (
        candidate.pf_name and _vf_selected(selector.pf_names, key=candidate.pf_name, vf_index=candidate.vf_index)
    ):
        return False
    if selector.root_devices and not (
        candidate.pf_address
        and _vf_selected(selector.root_devices, key=candidate.pf_address, vf_index=candidate.vf_index)
    ):
        return False
    return not (selector.is_rdma and not function.rdma)


def build_pools(config: Config, candidates: Sequence[Candidate]) -> list[Pool]:
    """One pool per resource with at least one device (upstream creates no server for an empty pool)."""
    taken: set[str] = set()
    pools = []
    for resource in config.resources:
        chosen: list[tuple[Candidate, Selector]] = []
        for selector in resource.selectors:
            for candidate in candidates:
                if candidate.address not in taken and matches(candidate, selector):
                    taken.add(candidate.address)
                    chosen.append((candidate, selector))
        if chosen:
            pools.append(Pool(resource=resource, devices=tuple(chosen)))
    return pools
