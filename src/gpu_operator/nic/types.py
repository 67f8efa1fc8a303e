"""What the NIC backend reports: PCI network functions, their RDMA devices, and the backend protocol.

Pure data. A :class:`NetFunction` is one PCI function of class ``0x02`` (a NIC port or an SR-IOV
virtual function) as sysfs describes it; an :class:`RdmaDevice` is one of its RDMA devices with the
character devices a container needs to use it. Addresses, IDs and names are kept as the kernel spells
them (lower-case hex without ``0x``), so selectors from upstream configs compare as strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: ``/sys/class/net/<if>/type`` values (ARPHRD_*) and the link type names the device plugins use.
ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
LINK_TYPES = {ARPHRD_ETHER: "ether", ARPHRD_INFINIBAND: "infiniband"}

MELLANOX_VENDOR = "15b3"
#: Mellanox PCI device IDs (pci.ids) -> product names, for the PFs of the cards this operator knows.
MELLANOX_PRODUCTS = {
    "1017": "ConnectX-5",
    "1019": "ConnectX-5 Ex",
    "101b": "ConnectX-6",
    "101c": "ConnectX-6 Virtual Function",
    "101d": "ConnectX-6 Dx",
    "101e": "ConnectX Family mlx5Gen Virtual Function",
    "101f": "ConnectX-6 Lx",
    "1021": "ConnectX-7",
    "1023": "ConnectX-8",
    "a2d6": "BlueField-2",
    "a2dc": "BlueField-3",
}

#: The RDMA subsystem's network namespace modes (``rdma system show``), "unknown" when not known.
NETNS_MODES = ("shared", "exclusive", "unknown")


@dataclass(frozen=True, kw_only=True)
class RdmaDevice:
    """One RDMA device (``mlx5_0``) and the character devices that serve it, as node paths."""

    name: str
    char_devices: tuple[str, ...]  # e.g. ("/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", ...), sorted
    complete: bool  # rdma_cm, umad and uverbs all present (what upstream's plugins require)


@dataclass(frozen=True, kw_only=True)
class NetFunction:
    """One PCI function of class 0x02xxxx: a physical port or an SR-IOV virtual function."""

    address: str  # "0000:3b:00.0"
    vendor: str  # "15b3" (lower-case hex, no 0x)
    device: str  # "1021"
    pci_class: str  # "020700"
    driver: str  # "mlx5_core" ("" when unbound)
    interfaces: tuple[str, ...]  # netdev names from <pci>/net/*, sorted
    link_type: str  # "ether" | "infiniband" | "" (from /sys/class/net/<if>/type: 1, 32)
    rdma: tuple[RdmaDevice, ...]  # from <pci>/infiniband/*, sorted by name
    numa_node: int | None  # None when absent or -1
    physfn: str | None  # a VF: its PF's address
    vfs: tuple[str, ...]  # a PF: its VFs' addresses (virtfn*), in virtfn order
    total_vfs: int  # sriov_totalvfs (0 when absent)
    num_vfs: int  # sriov_numvfs (0 when absent)

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def sriov_capable(self) -> bool:
        return self.total_vfs > 0


class NicError(RuntimeError):
    """The NIC backend could not answer (not raised for missing files: those read as absent)."""


class NicBackend(Protocol):
    """What agents ask about the node's network functions."""

    def functions(self) -> Sequence[NetFunction]:
        """Every class-0x02 PCI function, sorted by address."""
        ...

    def netlink_rdma_mode(self) -> str:
        """The RDMA subsystem's netns mode: "shared" | "exclusive" | "unknown"; never raises."""
        ...


@runtime_checkable
class DriverInfo(Protocol):
    """Backends that can also tell a kernel module's version (``/sys/module/<name>/version``)."""

    def module_version(self, module: str) -> str | None:
        """The module's version string; None when the module is not loaded or has no version (inbox)."""
        ...
