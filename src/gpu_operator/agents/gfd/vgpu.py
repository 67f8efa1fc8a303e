"""vGPU detection for GFD: NVIDIA PCI functions whose config space carries the vGPU capability.

A VM that runs on a vGPU sees a PCI function whose vendor-specific capability (ID 0x09) is signed
``VF`` and holds records; record 0 carries the host's vGPU manager driver version and branch (ten
bytes each, NUL padded). Upstream GFD reads ``/sys/bus/pci/devices/*/config`` for this, not NVML, so
this module does too. ``read_vgpu`` answers None when the tree cannot be read (upstream then writes
no vGPU label at all); a config space shorter than 256 bytes (an unprivileged read) counts as unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.shared.configinput import read_small_file

NVIDIA_VENDOR = "0x10de"
_STATUS, _STATUS_CAPABILITIES, _CAPABILITY_POINTER = 0x06, 0x10, 0x34
_VENDOR_SPECIFIC = 0x09
_RECORDS_START = 5
_FIELD = 10  # bytes of the host driver version and of the branch
CONFIG_SPACE_BYTES = 4096  # PCIe extended config space; nothing past it is read (nor a FIFO at all)


@dataclass(frozen=True, kw_only=True)
class VgpuInfo:
    """What the node's PCI functions say about vGPU (GFD's ``nvidia.com/vgpu.*`` labels)."""

    present: bool
    host_driver_version: str = ""
    host_driver_branch: str = ""


class UnreadableConfigError(Exception):
    """A PCI config space too short to walk (not read with privileges)."""


def vendor_capability(config: bytes) -> bytes | None:
    """The vendor-specific capability in PCI config space ``config``, or None when there is none."""
    if len(config) < 256:
        raise UnreadableConfigError(f"only {len(config)} bytes of PCI config space readable; GFD needs privileges")
    if not config[_STATUS] & _STATUS_CAPABILITIES:
        return None
    seen: set[int] = set()
    pos = config[_CAPABILITY_POINTER]
    while pos and pos not in seen and pos + 2 < len(config):
        cap_id, following, length = config[pos], config[pos + 1], config[pos + 2]
        if cap_id == 0xFF:
            break
        if cap_id == _VENDOR_SPECIFIC:
            return config[pos : pos + length]
        seen.add(pos)
        pos = following
    return None


def is_vgpu(capability: bytes) -> bool:
    """Whether a vendor-specific capability is a vGPU's (signature ``VF`` at offsets 3 and 4)."""
    return len(capability) >= 5 and capability[3:5] == b"VF"


def host_driver(capability: bytes) -> tuple[str, str] | None:
    """(host driver version, branch) from the capability's record 0; None when there is none."""
    pos = _RECORDS_START
    while pos < len(capability) and capability[pos] != 0:
        if pos + 1 >= len(capability) or capability[pos + 1] == 0:
            return None  # a record without a length: the chain is broken
        pos += capability[pos + 1]
    if pos + 2 + 2 * _FIELD > len(capability):
        return None
    version = capability[pos + 2 : pos + 2 + _FIELD]
    branch = capability[pos + 2 + _FIELD : pos + 2 + 2 * _FIELD]
    return version.decode("ascii", "replace").strip("\x00"), branch.decode("ascii", "replace").strip("\x00")


def read_vgpu(devices: Path) -> VgpuInfo | None:
    """vGPU facts from the PCI tree ``devices`` (``/sys/bus/pci/devices``); None when unreadable."""
    try:
        entries = sorted(devices.iterdir())
        found: list[bytes] = []
        for entry in entries:
            vendor = read_small_file(entry / "vendor", limit=64)
            if vendor is None:
                raise OSError(f"{entry}/vendor: not readable")
            if vendor.decode("ascii").strip().lower() != NVIDIA_VENDOR:
                continue
            config = read_small_file(entry / "config", limit=CONFIG_SPACE_BYTES)
            if config is None:
                raise OSError(f"{entry}/config: not readable")
            capability = vendor_capability(config)
            if capability is not None and is_vgpu(capability):
                found.append(capability)
    except (OSError, UnicodeDecodeError, UnreadableConfigError):
        return None
    info = VgpuInfo(present=bool(found))
    for capability in found:  # the last vGPU's host driver wins, as upstream
        driver = host_driver(capability)
        if driver is not None:
            info = VgpuInfo(present=True, host_driver_version=driver[0], host_driver_branch=driver[1])
    return info
