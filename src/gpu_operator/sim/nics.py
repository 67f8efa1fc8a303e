"""Mellanox NICs on simulated nodes, for the network operator: NIC models, what a node asks for, OS pools.

A simulated node may carry Mellanox NICs beside its GPUs (or instead of them: the ``cpu-only`` profile
with NICs is a plain NIC node). What the network operator reads of them is what NFD writes (the
``pci-15b3.present`` label, the OS release and kernel labels, already on every node) and the host
directory ``/run/mellanox/drivers`` its OFED container fills. The OFED renderer makes one DaemonSet per
OS/version/kernel pool, so NIC nodes come in pools (:data:`NIC_POOLS`: two by default) whose OS and
kernel override the GPU profile's.

Pure data: no I/O. ``gpu_operator.sim.shapes`` turns a request into a node shape.
"""

from __future__ import annotations

from dataclasses import dataclass

MELLANOX_VENDOR = "15b3"
ETHERNET_CLASS = "0200"
INFINIBAND_CLASS = "0207"


@dataclass(frozen=True, kw_only=True)
class NicModel:
    """One Mellanox NIC model, as its PCI functions enumerate."""

    key: str  # the short name node specs and node names use: ``cx7``
    name: str  # marketing name
    pci_device_id: int
    pci_class: str  # "0200" Ethernet or "0207" InfiniBand (the classes the chart's NodeFeatureRule matches)


NIC_MODELS: dict[str, NicModel] = {
    m.key: m
    for m in (
        NicModel(key="cx6", name="ConnectX-6", pci_device_id=0x101B, pci_class=INFINIBAND_CLASS),
        NicModel(key="cx6dx", name="ConnectX-6 Dx", pci_device_id=0x101D, pci_class=ETHERNET_CLASS),
        NicModel(key="cx7", name="ConnectX-7", pci_device_id=0x1021, pci_class=INFINIBAND_CLASS),
        NicModel(key="bf3", name="BlueField-3", pci_device_id=0xA2DC, pci_class=ETHERNET_CLASS),
    )
}
DEFAULT_NIC_MODEL = "cx7"


def nic_model(key: str) -> NicModel:
    """The NIC model called ``key``; ValueError naming the known ones otherwise."""
    try:
        return NIC_MODELS[key]
    except KeyError:
        raise ValueError(f"unknown NIC model {key!r}; known: {', '.join(sorted(NIC_MODELS))}") from None


@dataclass(frozen=True, kw_only=True)
class NicRequest:
    """``count`` NICs of ``model`` on each node of a request."""

    model: str = DEFAULT_NIC_MODEL
    count: int = 2

    def __post_init__(self) -> None:
        nic_model(self.model)
        if self.count < 1:
            raise ValueError(f"a NIC node needs at least one NIC, got count={self.count}")


@dataclass(frozen=True, kw_only=True)
class OsPool:
    """The OS release and kernel of a pool of nodes (what the OFED renderer groups by)."""

    os_id: str
    os_version_id: str
    kernel_version: str

    def __str__(self) -> str:
        return f"{self.os_id}:{self.os_version_id}:{self.kernel_version}"


#: Two pools, so the OFED renderer makes two DaemonSets (an upgrade test sees two kernels).
NIC_POOLS = (
    OsPool(os_id="ubuntu", os_version_id="22.04", kernel_version="5.15.0-105-generic"),
    OsPool(os_id="ubuntu", os_version_id="24.04", kernel_version="6.8.0-40-generic"),
)


def parse_os_pool(text: str) -> OsPool:
    """``ID:VERSION_ID:KERNEL`` (``ubuntu:24.04:6.8.0-40-generic``); ValueError otherwise."""
    parts = text.strip().split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"bad OS pool {text!r}: expected ID:VERSION_ID:KERNEL, e.g. ubuntu:24.04:6.8.0-40-generic")
    return OsPool(os_id=parts[0], os_version_id=parts[1], kernel_version=parts[2])
