"""The Allocate answer for one container, as plain data (the gRPC layer turns it into protobuf).

Follows the upstream device-list strategies: ``envvar`` (NVIDIA_VISIBLE_DEVICES), ``volume-mounts``
(one /dev/null mount per device), ``cdi-annotations`` (a ``cdi.k8s.io/...`` annotation) and
``cdi-cri`` (CDI device names in the response); MPS adds its pipe directory and shared memory;
GDS/GDRCopy/MOFED add their switches; ``passDeviceSpecs`` adds the character devices.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.agents.shared.resources import PluginDevice

CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
MOUNT_ROOT = "/var/run/nvidia-container-devices"


class RequestError(ValueError):
    """An Allocate request the plugin refuses (the kubelet shows the message on the pod)."""


@dataclass(frozen=True, kw_only=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(kw_only=True)
class ContainerAllocation:
    """What the runtime needs to give one container its devices."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    devices: list[DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


def _physical_ids(devices: Sequence[PluginDevice], *, by_index: bool) -> list[str]:
    ids = [d.index_id if by_index else d.physical_uuid for d in devices]
    return list(dict.fromkeys(ids))  # replicas of one GPU collapse to one runtime id


def allocate(
    *,
    settings: Settings,
    resource: str,
    known: dict[str, PluginDevice],
    requested: Sequence[str],
    response_id: str | None = None,
) -> ContainerAllocation:
    """Build the response for one container request, or raise :class:`RequestError`."""
    unknown = [d for d in requested if d not in known]
    if unknown:
        raise RequestError(f"invalid allocation request for {resource!r}: unknown device: {unknown[0]}")
    if settings.sharing is not None and settings.fail_requests_greater_than_one and len(requested) > 1:
        shared = any(known[d].replica is not None for d in requested)
        if shared:
            raise RequestError(
                f"invalid request: maximum request size for shared resources is 1; found {len(requested)}"
            )
    devs = [known[d] for d in requested]
    ids = _physical_ids(devs, by_index=settings.device_id_strategy == "index")
    out = ContainerAllocation()
    strategies = set(settings.device_list_strategy)
    cdi_names = [f"{CDI_KIND}={i}" for i in ids]
    if "cdi-annotations" in strategies:
        key = f"{settings.cdi_annotation_prefix}nvidia-device-plugin_{response_id or uuid.uuid4()}"
        out.annotations[key] = ",".join(cdi_names)
    if "cdi-cri" in strategies:
        out.cdi_devices.extend(cdi_names)
    if settings.sharing_mode == "mps" and any(d.replica is not None for d in devs):
        pipe = f"{settings.mps_root}/{resource}/pipe"
        out.envs["CUDA_MPS_PIPE_DIRECTORY"] = f"/mps/{resource}/pipe"
        out.mounts.append(Mount(container_path=f"/mps/{resource}/pipe", host_path=pipe))
        out.mounts.append(Mount(container_path="/mps/shm", host_path=f"{settings.mps_root}/shm"))
    for flag, env in (
        (settings.gdrcopy_enabled, "NVIDIA_GDRCOPY"),
        (settings.gds_enabled, "NVIDIA_GDS"),
        (settings.mofed_enabled, "NVIDIA_MOFED"),
    ):
        if flag:
            out.envs[env] = "enabled"
    if "envvar" in strategies:
        out.envs[VISIBLE] = ",".join(ids)
    if "volume-mounts" in strategies:
        out.envs[VISIBLE] = MOUNT_ROOT
        out.mounts.extend(Mount(container_path=f"{MOUNT_ROOT}/{i}", host_path="/dev/null") for i in ids)
    if settings.pass_device_specs:
        out.devices.extend(_device_specs(devs, dev_root=settings.dev_root))
    return out


def _device_specs(devs: Sequence[PluginDevice], *, dev_root: str) -> list[DeviceSpec]:
    root = dev_root.rstrip("/")
    paths = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    paths += [f"/dev/nvidia{i}" for i in sorted({d.gpu_index for d in devs})]
    return [DeviceSpec(container_path=p, host_path=f"{root}{p}") for p in paths]
