"""The fake driver's GPU description: the ``key=value`` config the fake ``libnvidia-ml.so`` reads.

It mirrors a ``SimulatedBackend`` of the same profile, seed and node name (UUIDs, serials,
PCI addresses, MIG profiles, NVLink and PCIe topology), so the NVML backend over the fake must report
exactly what the simulated backend reports; the contract checks compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpu_operator.gpu.catalog import NodeProfile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.telemetry import CLOCK_EVENT_GPU_IDLE, Telemetry, telemetry_of
from gpu_operator.gpu.types import Device, LinkType

_ARCH = {"kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6, "ampere": 7, "ada-lovelace": 8}
_ARCH |= {"hopper": 9, "blackwell": 10, "rubin": 13}
_LEVEL = {
    LinkType.SAME_BOARD: 0,
    LinkType.SINGLE_SWITCH: 10,
    LinkType.MULTI_SWITCH: 20,
    LinkType.HOST_BRIDGE: 30,
    LinkType.SAME_CPU: 40,
    LinkType.CROSS_CPU: 50,
}
_NVSWITCHES = 4  # NVLinks of a GPU spread over this many NVSwitch bus addresses
_FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
_NO_CLUSTER = "00000000-0000-0000-0000-000000000000"


def config_lines(*, profile: NodeProfile, seed: int = 0, node_name: str = "") -> list[str]:
    """``key=value`` lines describing the node that ``SimulatedBackend(profile, seed, node_name)`` is."""
    sim = SimulatedBackend(profile=profile, seed=seed, node_name=node_name)
    model = profile.model
    lines = [f"driver_version={profile.driver_version}", f"device_count={profile.gpu_count}"]
    major, minor = profile.cuda_driver_version
    lines.append(f"cuda_driver_version={major * 1000 + minor * 10}")
    if model is None:
        return lines
    nvswitch = profile.nvswitch and model.nvlinks > 0
    for d in sim.devices():
        key = f"device.{d.index}."
        lines += [
            f"{key}name={d.name}",
            f"{key}uuid={d.uuid}",
            f"{key}serial={d.serial}",
            f"{key}board_part_number={d.board_part_number}",
            f"{key}pci_bus_id={d.pci_bus_id}",
            f"{key}pci_device_id={d.pci_device_id:#x}",
            f"{key}memory_mib={d.memory_mib}",
            f"{key}reserved_mib={model.reserved_mib}",
            f"{key}cc={d.compute_capability[0]}.{d.compute_capability[1]}",
            f"{key}arch={_ARCH[d.architecture]}",
            f"{key}numa_node={d.numa_node}",
            f"{key}minor={d.minor_number}",
            f"{key}mig_capable={int(d.mig_capable)}",
            f"{key}mig_mode={int(d.mig_enabled)}",
            f"{key}mig_reset_required={int(model.mig_reset_required)}",
            f"{key}power_mw={int(model.idle_w * 1000)}",
            f"{key}temperature=31",
            f"{key}sm_clock={model.sm_clock_mhz[0]}",
            f"{key}mem_clock={model.mem_clock_mhz}",
            f"{key}energy_mj={1_000_000 + d.index}",
        ]
        lines += _telemetry_lines(key, telemetry_of(model))
        lines += _identity_lines(key, d, nvswitch=nvswitch)
        if nvswitch:
            remotes = [f"00000000:{0xC0 + link % _NVSWITCHES:02X}:00.0" for link in range(model.nvlinks)]
            lines.append(f"{key}nvlink={','.join(remotes)}")
        for p in d.mig_profiles:
            row = [p.profile_id, p.slices, p.max_count, p.memory_mib, p.multiprocessors, p.copy_engines]
            row += [p.decoders, p.encoders, p.jpegs, p.ofas]
            lines.append(f"{key}gi_profile.{p.nvml_profile}={','.join(map(str, row))}")
    for link in profile.links():
        if link.type is not LinkType.NVLINK:
            lines.append(f"topology.{link.a}.{link.b}={_LEVEL[link.type]}")
    sim.close()
    return lines


def _telemetry_lines(key: str, can: Telemetry) -> list[str]:
    """The optional readings the model gives (see ``gpu.telemetry``), at the values an idle GPU reads."""
    lines = [f"{key}memory_temperature=35"] if can.memory_sensor else []
    lines += [f"{key}tel.remapped_rows=0,0,0,0"] if can.row_remapping else []
    lines += [f"{key}tel.gpm=1"] if can.gpm else []
    lines += [f"{key}tel.nvlink_kib=0,0"] if can.nvlink else []
    return [*lines, f"{key}tel.clock_events={CLOCK_EVENT_GPU_IDLE}"]


def _identity_lines(key: str, device: Device, *, nvswitch: bool) -> list[str]:
    """PCI class and NVLink-fabric registration (GFD's gpu.mode and gpu.clique)."""
    lines = [f"{key}pci_class={device.pci_class:#08x}"] if device.pci_class is not None else []
    if device.fabric_clique:
        cluster, clique = device.fabric_clique.rsplit(".", 1)
        lines.append(f"{key}fabric={_FABRIC_COMPLETED},0,{cluster},{clique}")
    elif nvswitch:
        # An NVSwitch node's fabric manager registers its GPUs with an all-zero cluster UUID: no clique.
        lines.append(f"{key}fabric={_FABRIC_COMPLETED},0,{_NO_CLUSTER},0")
    return lines


def write_config(
    path: Path, *, profile: NodeProfile, seed: int = 0, node_name: str = "", extra: Sequence[str] = ()
) -> Path:
    """Write the config for ``profile`` (plus ``extra`` lines) to ``path``."""
    path.write_text("\n".join([*config_lines(profile=profile, seed=seed, node_name=node_name), *extra]) + "\n")
    return path
