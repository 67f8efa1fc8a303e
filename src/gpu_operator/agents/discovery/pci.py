"""NVIDIA GPUs in a PCI device tree (``/sys/bus/pci/devices`` or a fake one laid out the same way), pure.

A device directory holds ``vendor`` (``0x10de`` for NVIDIA) and ``class`` (``0x030000`` VGA, ``0x030200``
3D controller: the two classes NFD's ``pci-0300_10de``/``pci-0302_10de`` labels stand for). NVIDIA's
audio functions, USB controllers and NVSwitches (class ``0x0680``) are not GPUs.
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.shared.configinput import read_small_file

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")


def _read(path: Path) -> str:
    # A sysfs attribute is a few bytes; a FIFO or a huge file in a fake tree reads as absent or cut short.
    data = read_small_file(path, limit=64)
    try:
        return (data or b"").decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return ""


def nvidia_gpus(devices: Path) -> list[str]:
    """The PCI addresses of NVIDIA GPUs under ``devices`` (sorted; empty when the tree is absent)."""
    if not devices.is_dir():
        return []
    found = []
    for device in sorted(devices.iterdir()):
        if _read(device / "vendor") == NVIDIA_VENDOR and _read(device / "class")[:6] in GPU_CLASSES:
            found.append(device.name)
    return found
