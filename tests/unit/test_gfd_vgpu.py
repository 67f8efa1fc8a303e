"""vGPU detection from PCI config space (the layout upstream's internal/vgpu reads)."""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.gfd.vgpu import VgpuInfo, host_driver, read_vgpu


def _config(*, vgpu: bool, version: bytes = b"550.54.16", branch: bytes = b"r550_40") -> bytes:
    """256 bytes of config space: one capability list entry, vendor-specific (0x09) at 0x60."""
    space = bytearray(256)
    space[0:2] = b"\xde\x10"
    space[0x06] = 0x10  # capability list present
    space[0x34] = 0x60
    record = bytes([0, 22]) + version.ljust(10, b"\0") + branch.ljust(10, b"\0")
    signature = b"VF" if vgpu else b"XX"
    capability = bytes([0x09, 0x00, 5 + 4 + len(record)]) + signature + bytes([1, 4, 0, 0]) + record
    space[0x60 : 0x60 + len(capability)] = capability
    return bytes(space)


def _device(root: Path, address: str, *, vendor: str, config: bytes) -> None:
    directory = root / address
    directory.mkdir(parents=True)
    (directory / "vendor").write_text(vendor + "\n")
    (directory / "config").write_bytes(config)


def test_guest_with_vgpu(tmp_path: Path) -> None:
    _device(tmp_path, "0000:00:01.0", vendor="0x8086", config=b"\0" * 64)  # not NVIDIA: not read
    _device(tmp_path, "0000:02:00.0", vendor="0x10de", config=_config(vgpu=True))
    assert read_vgpu(tmp_path) == VgpuInfo(present=True, host_driver_version="550.54.16", host_driver_branch="r550_40")


def test_bare_metal_and_unreadable(tmp_path: Path) -> None:
    _device(tmp_path, "0000:18:00.0", vendor="0x10de", config=_config(vgpu=False))
    assert read_vgpu(tmp_path) == VgpuInfo(present=False)
    assert read_vgpu(tmp_path / "missing") is None
    _device(tmp_path, "0000:19:00.0", vendor="0x10de", config=b"\0" * 64)  # unprivileged read
    assert read_vgpu(tmp_path) is None


def test_record_chain() -> None:
    assert host_driver(b"\x09\x00\x10VF\x01\x00") is None  # a zero-length record: broken chain
