"""Which network functions a resource takes, and the character devices it hands to containers. Pure.

As upstream: every class-0x02 function is a candidate (physical ports and virtual functions alike); each
non-empty selector list must contain the function's value (the lists AND together). The interface name
compared is the function's first netdev ("" when it has none), the link type is that netdev's
(``ether``/``infiniband``). Vendor and device IDs compare without case and without a ``0x`` prefix.

A matched function contributes its RDMA devices that are complete (``rdma_cm``, ``umad`` and ``uverbs``
present); a function without one is matched but gives nothing. Every container gets the character
devices of all of them: one list, each path once, in the functions' order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpu_operator.agents.rdmadp.config import Selectors
from gpu_operator.nic.types import NetFunction, RdmaDevice


def _hex(value: str) -> str:
    value = value.strip().lower()
    return value[2:] if value.startswith("0x") else value


def if_name(function: NetFunction) -> str:
    """The interface name upstream compares: the first netdev of the function."""
    return function.interfaces[0] if function.interfaces else ""


def matches(function: NetFunction, selectors: Selectors) -> bool:
    """Whether ``function`` passes every non-empty selector list."""
    if selectors.vendors and _hex(function.vendor) not in {_hex(v) for v in selectors.vendors}:
        return False
    if selectors.device_ids and _hex(function.device) not in {_hex(d) for d in selectors.device_ids}:
        return False
    if selectors.drivers and function.driver not in selectors.drivers:
        return False
    if selectors.if_names and if_name(function) not in selectors.if_names:
        return False
    return not (selectors.link_types and function.link_type not in selectors.link_types)


def select(functions: Iterable[NetFunction], selectors: Selectors) -> list[NetFunction]:
    """The functions ``selectors`` match, in the given order."""
    return [f for f in functions if matches(f, selectors)]


def rdma_devices(functions: Iterable[NetFunction]) -> list[RdmaDevice]:
    """The complete RDMA devices of ``functions``."""
    return [device for function in functions for device in function.rdma if device.complete]


def with_rdma(functions: Iterable[NetFunction]) -> list[NetFunction]:
    """The functions with at least one complete RDMA device (those a container can use)."""
    return [f for f in functions if any(d.complete for d in f.rdma)]


def char_devices(functions: Sequence[NetFunction]) -> tuple[str, ...]:
    """Every character device of the functions' complete RDMA devices, each path once."""
    seen: dict[str, None] = {}
    for device in rdma_devices(functions):
        for path in device.char_devices:
            seen.setdefault(path, None)
    return tuple(seen)
