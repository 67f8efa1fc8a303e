"""GPU models and node profiles: the catalog the simulated backend and simulated nodes are built from.

``GPU_MODELS`` maps a model key (``h100-sxm5-80gb``) to what NVML would report for that SKU plus the
ranges the simulated metrics move in; ``NODE_PROFILES`` maps a node shape (``dgx-h100``, ``pcie-l4``,
``cpu-only``) to its GPUs, interconnect, CPU, memory, OS and driver. The literals live in
``catalog_data``; this module turns them into frozen dataclasses once, at import, and derives what
follows from them (the GPU-to-GPU links, NUMA nodes, CUDA version of a driver branch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpu_operator.gpu.catalog_data import CUDA_BY_DRIVER_BRANCH, GPU_MODEL_ROWS, NODE_PROFILE_ROWS
from gpu_operator.gpu.mig import profile_order
from gpu_operator.gpu.types import Link, LinkType, MigProfile

_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    """One GPU SKU: identity as NVML reports it, and the ranges its simulated metrics move in."""

    key: str
    name: str  # NVML's device name, e.g. "NVIDIA H100 80GB HBM3"
    architecture: str  # GFD family: ampere, hopper, ada-lovelace, turing, blackwell
    compute_capability: tuple[int, int]
    memory_mib: int
    reserved_mib: int  # framebuffer the driver keeps for itself
    pci_device_id: int  # device id << 16 | 0x10DE
    pci_class: int  # 24-bit PCI class code: 0x030200 3D controller (GFD gpu.mode=compute), 0x030000 VGA
    board_part_number: str
    tdp_w: float
    idle_w: float
    sm_clock_mhz: tuple[int, int]  # idle, maximum
    mem_clock_mhz: int
    nvlinks: int  # NVLink links per GPU (0: PCIe only)
    mig_profiles: tuple[MigProfile, ...] = ()
    # Whether a MIG mode change stays pending until the GPU is reset (NVML's activation status).
    mig_reset_required: bool = True

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)


@dataclass(frozen=True, kw_only=True)
class NodeProfile:
    """A node shape: how many GPUs of which model, how they are wired, and the host around them."""

    name: str
    gpu_model: str | None  # key into GPU_MODELS; None without GPUs
    gpu_count: int
    nvswitch: bool
    cpu_cores: int
    memory: str  # Kubernetes quantity, e.g. "2048Gi"
    os_id: str
    os_version_id: str
    kernel_version: str
    driver_version: str  # default driver; "" when the node has no GPU
    cuda_driver_version: tuple[int, int]
    machine: str = ""  # DMI product name (GFD's nvidia.com/gpu.machine)
    sockets: int = 2
    pcie_layout: tuple[tuple[int, int], ...] = ()  # (socket, PCIe switch) per GPU; empty: derived

    @property
    def model(self) -> GpuModel | None:
        return GPU_MODELS[self.gpu_model] if self.gpu_model else None

    @property
    def memory_bytes(self) -> int:
        return quantity_bytes(self.memory)

    def placement(self, index: int) -> tuple[int, int]:
        """(socket, PCIe switch) of GPU ``index``: from ``pcie_layout``, else halves per socket, pairs per switch."""
        if self.pcie_layout:
            return self.pcie_layout[index]
        per_socket = max(1, -(-self.gpu_count // self.sockets))
        return index // per_socket, index // 2

    def numa_node(self, index: int) -> int:
        return self.placement(index)[0]

    def pci_bus_id(self, index: int) -> str:
        """A PCI address for GPU ``index``: one bus range per PCIe switch, as on real boards."""
        switch = self.placement(index)[1]
        slot = sum(1 for i in range(index) if self.placement(i)[1] == switch)
        return f"00000000:{0x18 + 0x20 * switch + 0x02 * slot:02X}:00.0"

    def links(self) -> tuple[Link, ...]:
        """The link between every pair of GPUs (a < b), as both backends must report it."""
        model = self.model
        lanes = model.nvlinks if model else 0
        out = []
        for a in range(self.gpu_count):
            for b in range(a + 1, self.gpu_count):
                if self.nvswitch and lanes:
                    out.append(Link(a=a, b=b, type=LinkType.NVLINK, nvlinks=lanes))
                    continue
                (sock_a, sw_a), (sock_b, sw_b) = self.placement(a), self.placement(b)
                if sw_a == sw_b:
                    kind = LinkType.SINGLE_SWITCH
                elif sock_a == sock_b:
                    kind = LinkType.HOST_BRIDGE
                else:
                    kind = LinkType.CROSS_CPU
                out.append(Link(a=a, b=b, type=kind))
        return tuple(out)


def quantity_bytes(quantity: str) -> int:
    """Bytes in a binary Kubernetes quantity (``"64Gi"``)."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise ValueError(f"not a binary quantity: {quantity!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def cuda_version_for_driver(driver_version: str, *, default: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """The CUDA driver API version a driver branch ships (``550.54.15`` -> ``(12, 4)``)."""
    try:
        branch = int(driver_version.split(".", 1)[0])
    except ValueError:
        return default
    known = [b for b in CUDA_BY_DRIVER_BRANCH if b <= branch]
    return CUDA_BY_DRIVER_BRANCH[max(known)] if known else default


def _mig_profile(row: tuple[str, int, int, int, int, int, int, int, int, int, int]) -> MigProfile:
    name, profile_id, nvml_profile, count, memory, sms, ce, dec, enc, jpeg, ofa = row
    return MigProfile(
        name=name,
        profile_id=profile_id,
        slices=int(name.split("g.", 1)[0]),
        memory_mib=memory,
        max_count=count,
        multiprocessors=sms,
        copy_engines=ce,
        decoders=dec,
        encoders=enc,
        jpegs=jpeg,
        ofas=ofa,
        nvml_profile=nvml_profile,
    )


def _gpu_model(key: str, row: dict[str, Any]) -> GpuModel:
    fields = {k: v for k, v in row.items() if k != "mig"}
    profiles = sorted((_mig_profile(r) for r in row["mig"]), key=profile_order)
    return GpuModel(key=key, mig_profiles=tuple(profiles), **fields)


def _node_profile(name: str, row: dict[str, Any]) -> NodeProfile:
    cuda = cuda_version_for_driver(row["driver_version"])
    return NodeProfile(name=name, cuda_driver_version=cuda, **row)


GPU_MODELS: dict[str, GpuModel] = {key: _gpu_model(key, row) for key, row in GPU_MODEL_ROWS.items()}
NODE_PROFILES: dict[str, NodeProfile] = {name: _node_profile(name, row) for name, row in NODE_PROFILE_ROWS.items()}


def node_profile(name: str) -> NodeProfile:
    """The node profile called ``name``; KeyError listing the known names otherwise."""
    try:
        return NODE_PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown node profile {name!r}; known profiles: {', '.join(sorted(NODE_PROFILES))}") from None


def gpu_model(key: str) -> GpuModel:
    """The GPU model called ``key``; KeyError listing the known keys otherwise."""
    try:
        return GPU_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown GPU model {key!r}; known models: {', '.join(sorted(GPU_MODELS))}") from None
