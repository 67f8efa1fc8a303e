"""Hand-built devices for pure tests (independent of the simulated backend's catalog)."""

from __future__ import annotations

from gpu_operator.gpu.types import Device, Link, LinkType, MigDevice


def gpu(index: int, *, name: str = "NVIDIA H100 80GB HBM3", mig: bool = False, numa: int = 0) -> Device:
    return Device(
        index=index,
        uuid=f"GPU-0000000{index:x}-1111-2222-3333-444444444444",
        name=name,
        pci_bus_id=f"00000000:{index + 0x10:02X}:00.0",
        memory_mib=81559,
        compute_capability=(9, 0),
        architecture="hopper",
        serial=f"165{index:07d}",
        board_part_number="692-2G520-0200-000",
        numa_node=numa,
        mig_capable=True,
        mig_enabled=mig,
    )


def mig_device(parent: int, slot: int, profile: str = "1g.10gb", memory: int = 9984) -> MigDevice:
    return MigDevice(
        uuid=f"MIG-{parent}{slot}000000-aaaa-bbbb-cccc-dddddddddddd",
        parent_index=parent,
        profile=profile,
        gi_id=slot + 1,
        ci_id=0,
        memory_mib=memory,
        index=slot,
    )


def nvswitch_links(n: int, lanes: int = 18) -> list[Link]:
    return [Link(a=a, b=b, type=LinkType.NVLINK, nvlinks=lanes) for a in range(n) for b in range(a + 1, n)]


def pcie_links(n: int) -> list[Link]:
    """A PCIe tree: pairs share a switch, quads a host bridge, halves a CPU socket."""

    def kind(a: int, b: int) -> LinkType:
        if a // 2 == b // 2:
            return LinkType.SINGLE_SWITCH
        if a // 4 == b // 4:
            return LinkType.HOST_BRIDGE
        if a // (n // 2) == b // (n // 2):
            return LinkType.SAME_CPU
        return LinkType.CROSS_CPU

    return [Link(a=a, b=b, type=kind(a, b)) for a in range(n) for b in range(a + 1, n)]
