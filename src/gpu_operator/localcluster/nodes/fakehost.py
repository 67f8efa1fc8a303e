"""What a real node's host shows of its hardware when the machine has none of it: a fake PCI tree.

The kernel's ``/sys`` cannot be changed, so a node given PCI functions (a GPU node of the simulator's
catalog, see ``sim.hardware``) gets a device tree laid out like ``/sys/bus/pci/devices`` (``vendor``,
``device``, ``class`` per function) in its data directory, and the node's mount namespace binds it
over ``/sys/bus/pci/devices``: the node's containers, which see the node's ``/sys`` through their
hostPath mounts, read the fake tree; the host and the other nodes keep the real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PciFunction:
    """One PCI function as sysfs names and describes it."""

    address: str  # "0000:18:00.0"
    vendor: int
    device: int
    pci_class: int  # 0x030200: a 3D controller


def write_pci_tree(devices: Path, *, functions: Sequence[PciFunction]) -> None:
    """Lay out ``functions`` under ``devices``."""
    for function in functions:
        directory = devices / function.address
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vendor").write_text(f"0x{function.vendor:04x}\n")
        (directory / "device").write_text(f"0x{function.device:04x}\n")
        (directory / "class").write_text(f"0x{function.pci_class:06x}\n")
        # A real function has these too; NFD's PCI source refuses a device without them.
        (directory / "subsystem_vendor").write_text(f"0x{function.vendor:04x}\n")
        (directory / "subsystem_device").write_text(f"0x{function.device:04x}\n")
