"""The PCI functions of a catalog node profile, for a real node's fake host (``localcluster.nodes.fakehost``)."""

from __future__ import annotations

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.localcluster.nodes.fakehost import PciFunction

NVIDIA_VENDOR = 0x10DE
CLASS_3D_CONTROLLER = 0x030200
#: A non-GPU function every board has (an Intel host bridge), so a reader must filter, not count.
HOST_BRIDGE = PciFunction(address="0000:00:00.0", vendor=0x8086, device=0x1237, pci_class=0x060000)


def sysfs_address(bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML's form) as sysfs names it: ``0000:18:00.0``, lower case."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def pci_functions(profile_name: str) -> list[PciFunction]:
    """The host bridge and one 3D controller per GPU of ``profile_name``, at the addresses NVML reports."""
    profile = node_profile(profile_name)
    functions = [HOST_BRIDGE]
    model = profile.model
    if model is not None:
        for index in range(profile.gpu_count):
            address = sysfs_address(profile.pci_bus_id(index))
            device = model.pci_device_id >> 16
            functions.append(
                PciFunction(address=address, vendor=NVIDIA_VENDOR, device=device, pci_class=CLASS_3D_CONTROLLER)
            )
    return functions
