"""NIC feature discovery labels: a pure function from what the NIC backend reports to the label set.

Upstream nic-feature-discovery publishes one label, ``nvidia.com/mofed.version`` (the out-of-tree
mlx5_core driver's version, absent for the inbox driver); this agent publishes it under the same key
and adds its own ``network.nvidia.com/nic.*`` family (:mod:`gpu_operator.names.network`): how many
Mellanox ports (physical functions) the node has, their product, driver and link types, whether they
can do RDMA, the RDMA netns mode and the SR-IOV state. Only Mellanox PFs count; VFs are summarised
by ``sriov.vfs``. A fact the backend cannot give leaves its label out. No I/O here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.names.network import (
    NIC_FD_COUNT,
    NIC_FD_DRIVER,
    NIC_FD_ETHERNET_COUNT,
    NIC_FD_INFINIBAND_COUNT,
    NIC_FD_MOFED_VERSION,
    NIC_FD_PREFIX,
    NIC_FD_PRODUCT,
    NIC_FD_RDMA,
    NIC_FD_RDMA_NETNS_MODE,
    NIC_FD_SRIOV_CAPABLE,
    NIC_FD_SRIOV_VFS,
)  # fmt: skip
from gpu_operator.nic.types import MELLANOX_PRODUCTS, MELLANOX_VENDOR, NetFunction

_VALUE_MAX = 63


@dataclass(frozen=True, kw_only=True)
class NicView:
    """Everything the labels depend on, read once from the backend."""

    functions: Sequence[NetFunction]
    netns_mode: str = "unknown"
    driver_version: str | None = None  # /sys/module/mlx5_core/version; None for the inbox driver


def sanitise(value: str) -> str:
    """A valid label value: characters outside ``[A-Za-z0-9-_.]`` dropped, spaces to ``-``, 63 at most."""
    value = re.sub(r"\s+", "-", value.strip())
    value = re.sub(r"[^A-Za-z0-9\-_.]", "", value)[:_VALUE_MAX]
    return value.strip("-_.")


def product(device: str) -> str:
    """The product name of a Mellanox device ID (``pci-15b3-<id>`` when unknown)."""
    return MELLANOX_PRODUCTS.get(device.lower(), f"pci-{MELLANOX_VENDOR}-{device.lower()}")


def _most_common(values: Sequence[str]) -> str:
    """The most frequent value; ties go to the one seen first (functions come sorted by address)."""
    counts = Counter(v for v in values if v)
    if not counts:
        return ""
    best = max(counts.values())
    return next(v for v in values if counts.get(v) == best)


def compute_labels(view: NicView) -> dict[str, str]:
    """The agent's labels for ``view`` (empty when the node has no Mellanox NIC and no MOFED driver)."""
    labels: dict[str, str] = {}
    if view.driver_version and sanitise(view.driver_version):
        labels[NIC_FD_MOFED_VERSION] = sanitise(view.driver_version)
    pfs = [f for f in view.functions if f.vendor == MELLANOX_VENDOR and not f.is_vf]
    if not pfs:
        return labels
    links = Counter(f.link_type for f in pfs)
    labels[NIC_FD_COUNT] = str(len(pfs))
    labels[NIC_FD_PRODUCT] = sanitise(_most_common([product(f.device) for f in pfs]))
    driver = _most_common([f.driver for f in pfs])
    if driver:
        labels[NIC_FD_DRIVER] = sanitise(driver)
    if links["ether"]:
        labels[NIC_FD_ETHERNET_COUNT] = str(links["ether"])
    if links["infiniband"]:
        labels[NIC_FD_INFINIBAND_COUNT] = str(links["infiniband"])
    labels[NIC_FD_RDMA] = str(any(d.complete for f in pfs for d in f.rdma)).lower()
    if view.netns_mode in ("shared", "exclusive"):
        labels[NIC_FD_RDMA_NETNS_MODE] = view.netns_mode
    capable = any(f.total_vfs > 0 for f in pfs)
    labels[NIC_FD_SRIOV_CAPABLE] = str(capable).lower()
    if capable:
        labels[NIC_FD_SRIOV_VFS] = str(sum(f.num_vfs for f in pfs))
    return labels


def owned(key: str) -> bool:
    """Whether this agent owns the label ``key`` (sets it, and removes it when it no longer applies)."""
    return key.startswith(NIC_FD_PREFIX) or key == NIC_FD_MOFED_VERSION


def label_changes(*, current: Mapping[str, str], computed: Mapping[str, str]) -> dict[str, str | None]:
    """The patch that takes ``current`` to ``computed`` for the owned labels: set (str) or remove (None)."""
    changes: dict[str, str | None] = {k: v for k, v in computed.items() if current.get(k) != v}
    changes |= {k: None for k in current if owned(k) and k not in computed}
    return changes
