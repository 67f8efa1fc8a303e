"""From the node's GPUs and the settings to the resources the plugin advertises (pure; the MPS agent
starts a daemon for each MPS-shared one).

MIG strategies map devices to resource names as upstream (``none``: whole GPUs; ``single``: identical
MIG devices as ``nvidia.com/gpu``; ``mixed``: ``nvidia.com/mig-<profile>``); time-slicing and MPS
replicate devices as ``<id>::<n>``. Invalid layouts raise :class:`LayoutError` with the upstream
wording, so the plugin can refuse a config and keep serving the previous one. Next: the device plugin's
``allocation``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.gpu.types import Device, MigDevice
from gpu_operator.names import keys

GPU_RESOURCE = keys.GPU_RESOURCE


class LayoutError(ValueError):
    """The GPUs on this node cannot be exposed with the chosen strategy."""


@dataclass(frozen=True, kw_only=True)
class PluginDevice:
    """One schedulable device as the kubelet sees it."""

    id: str  # UUID, MIG UUID, or "<uuid>::<n>" for a shared replica
    physical_uuid: str  # the GPU or MIG device behind it
    gpu_index: int  # index of the physical GPU (the parent for MIG)
    index_id: str  # the index form used with deviceIDStrategy=index ("0", MIG "0:1")
    numa_node: int | None
    replica: int | None = None
    mig_profile: str | None = None


@dataclass(frozen=True, kw_only=True)
class Resource:
    """A resource name and its devices; ``replicas`` > 1 when shared."""

    name: str
    devices: tuple[PluginDevice, ...]
    replicas: int = 1
    shared_mode: str = "none"
    profile: str | None = None  # MIG profile (mixed strategy)
    physical: tuple[PluginDevice, ...] = field(default_factory=tuple)  # devices before replication


def mig_resource_name(profile: str) -> str:
    """``nvidia.com/mig-1g.10gb`` from profile ``1g.10gb`` (``+`` becomes ``.``, as upstream)."""
    return f"nvidia.com/mig-{profile.replace('+', '.')}"


def _gpu(dev: Device) -> PluginDevice:
    return PluginDevice(
        id=dev.uuid, physical_uuid=dev.uuid, gpu_index=dev.index, index_id=str(dev.index), numa_node=dev.numa_node
    )


def _mig(mig: MigDevice, parent: Device) -> PluginDevice:
    return PluginDevice(
        id=mig.uuid,
        physical_uuid=mig.uuid,
        gpu_index=parent.index,
        index_id=f"{parent.index}:{mig.index}",
        numa_node=parent.numa_node,
        mig_profile=mig.profile,
    )


def base_resources(
    *, devices: Sequence[Device], mig: Mapping[int, Sequence[MigDevice]], strategy: str
) -> dict[str, list[PluginDevice]]:
    """Resource name -> physical devices, before any sharing."""
    out: dict[str, list[PluginDevice]] = {}
    enabled = [d for d in devices if d.mig_enabled]
    if strategy == "none" or not enabled:
        if devices:
            out[GPU_RESOURCE] = [_gpu(d) for d in devices]
        return out
    if strategy == "single":
        if len(enabled) != len(devices):
            raise LayoutError("all devices on the node must be configured with the same migEnabled value")
        migs = [(m, d) for d in devices for m in mig.get(d.index, ())]
        if any(not mig.get(d.index) for d in devices):
            raise LayoutError("every MIG-enabled GPU needs at least one MIG device with the single strategy")
        profiles = {m.profile for m, _ in migs}
        if len(profiles) > 1:
            raise LayoutError(f"more than one MIG device type present on node: {sorted(profiles)}")
        out[GPU_RESOURCE] = [_mig(m, d) for m, d in migs]
        return out
    if strategy == "mixed":
        for d in devices:
            if not d.mig_enabled:
                out.setdefault(GPU_RESOURCE, []).append(_gpu(d))
                continue
            for m in mig.get(d.index, ()):
                out.setdefault(mig_resource_name(m.profile), []).append(_mig(m, d))
        return out
    raise LayoutError(f"unknown MIG strategy {strategy!r}")


def build_resources(
    *, devices: Sequence[Device], mig: Mapping[int, Sequence[MigDevice]], settings: Settings
) -> list[Resource]:
    """Every resource the plugin serves, sharing applied; sorted by name."""
    base = base_resources(devices=devices, mig=mig, strategy=settings.mig_strategy)
    sharing = settings.sharing
    shared = {r.name: r for r in sharing.resources} if sharing else {}
    unknown = sorted(set(shared) - set(base))
    if unknown and base:
        # Sharing a resource this node does not have is a config mistake; say so instead of ignoring it.
        raise LayoutError(f"sharing config names resources this node does not advertise: {unknown}")
    out: list[Resource] = []
    for name in sorted(base):
        physical = tuple(base[name])
        rule = shared.get(name)
        if rule is None:
            out.append(Resource(name=name, devices=physical, physical=physical))
            continue
        if settings.sharing_mode == "mps" and any(d.mig_profile for d in physical):
            raise LayoutError(f"MPS sharing does not support MIG devices ({name})")
        replicas = tuple(
            PluginDevice(
                id=f"{d.id}::{n}",
                physical_uuid=d.physical_uuid,
                gpu_index=d.gpu_index,
                index_id=d.index_id,
                numa_node=d.numa_node,
                replica=n,
                mig_profile=d.mig_profile,
            )
            for d in physical
            for n in range(rule.replicas)
        )
        # Per-resource `rename` is parsed but ignored, as upstream does; only renameByDefault renames.
        renamed = f"{name}.shared" if sharing and sharing.rename_by_default else name
        out.append(
            Resource(
                name=renamed,
                devices=replicas,
                replicas=rule.replicas,
                shared_mode=settings.sharing_mode,
                physical=physical,
            )
        )
    return sorted(out, key=lambda r: r.name)


def socket_name(resource: str) -> str:
    """``nvidia-gpu.sock`` for ``nvidia.com/gpu``, ``nvidia-mig-1g.10gb.sock`` for a MIG resource."""
    return f"nvidia-{resource.split('/', 1)[1]}.sock"
