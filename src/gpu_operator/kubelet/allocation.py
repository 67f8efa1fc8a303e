"""Plain data for the kubelet APIs, and conversions from and to their protobuf messages.

Callers (the simulated kubelet, agents, tests) work with these frozen dataclasses; only this module and
the gRPC helpers touch the generated message classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.podresources.v1 import podresources_pb2 as pr
from gpu_operator.kubelet.paths import HEALTHY, UNHEALTHY


@dataclass(frozen=True, kw_only=True)
class PluginDevice:
    """One device as a plugin advertises it in ListAndWatch."""

    id: str
    healthy: bool = True
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, kw_only=True)
class DeviceNodeSpec:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, kw_only=True)
class ContainerAllocation:
    """What a plugin's Allocate answered for one container and one resource."""

    resource_name: str
    device_ids: tuple[str, ...]
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceNodeSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ResourceDevices:
    """Device ids of one resource (in a container, or allocatable on the node)."""

    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ContainerDevices:
    name: str
    devices: tuple[ResourceDevices, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PodDevices:
    """The devices assigned to one pod's containers, as the PodResources API reports them."""

    namespace: str
    name: str
    containers: tuple[ContainerDevices, ...] = ()


# -- device plugin messages ---------------------------------------------------------------------------


def _topology(numa_nodes: Sequence[int]) -> dp.TopologyInfo | None:
    return dp.TopologyInfo(nodes=[dp.NUMANode(ID=n) for n in numa_nodes]) if numa_nodes else None


def devices_to_pb(devices: Iterable[PluginDevice]) -> dp.ListAndWatchResponse:
    return dp.ListAndWatchResponse(
        devices=[
            dp.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY, topology=_topology(d.numa_nodes))
            for d in devices
        ]
    )


def devices_from_pb(response: dp.ListAndWatchResponse) -> list[PluginDevice]:
    return [
        PluginDevice(
            id=d.ID,
            healthy=d.health == HEALTHY,
            numa_nodes=tuple(n.ID for n in d.topology.nodes) if d.HasField("topology") else (),
        )
        for d in response.devices
    ]


def allocation_from_pb(
    *, resource_name: str, device_ids: Sequence[str], response: dp.ContainerAllocateResponse
) -> ContainerAllocation:
    return ContainerAllocation(
        resource_name=resource_name,
        device_ids=tuple(device_ids),
        envs=dict(response.envs),
        mounts=tuple(
            MountSpec(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in response.mounts
        ),
        devices=tuple(
            DeviceNodeSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in response.devices
        ),
        annotations=dict(response.annotations),
        cdi_devices=tuple(c.name for c in response.cdi_devices),
    )


def allocation_to_pb(allocation: ContainerAllocation) -> dp.ContainerAllocateResponse:
    """The message a plugin answers with (used by plugins written in Python and by tests)."""
    return dp.ContainerAllocateResponse(
        envs=dict(allocation.envs),
        mounts=[
            dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            dp.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in allocation.devices
        ],
        annotations=dict(allocation.annotations),
        cdi_devices=[dp.CDIDevice(name=name) for name in allocation.cdi_devices],
    )


# -- PodResources messages ------------------------------------------------------------------------------


def _pr_devices(devices: ResourceDevices) -> pr.ContainerDevices:
    topology = pr.TopologyInfo(nodes=[pr.NUMANode(ID=n) for n in devices.numa_nodes]) if devices.numa_nodes else None
    return pr.ContainerDevices(
        resource_name=devices.resource_name, device_ids=list(devices.device_ids), topology=topology
    )


def _resource_devices(message: pr.ContainerDevices) -> ResourceDevices:
    numa = tuple(n.ID for n in message.topology.nodes) if message.HasField("topology") else ()
    return ResourceDevices(resource_name=message.resource_name, device_ids=tuple(message.device_ids), numa_nodes=numa)


def pods_to_pb(pods: Iterable[PodDevices]) -> pr.ListPodResourcesResponse:
    return pr.ListPodResourcesResponse(pod_resources=[pod_to_pb(pod) for pod in pods])


def pod_to_pb(pod: PodDevices) -> pr.PodResources:
    return pr.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pr.ContainerResources(name=c.name, devices=[_pr_devices(d) for d in c.devices]) for c in pod.containers
        ],
    )


def pods_from_pb(response: pr.ListPodResourcesResponse) -> list[PodDevices]:
    return [pod_from_pb(pod) for pod in response.pod_resources]


def pod_from_pb(pod: pr.PodResources) -> PodDevices:
    return PodDevices(
        namespace=pod.namespace,
        name=pod.name,
        containers=tuple(
            ContainerDevices(name=c.name, devices=tuple(_resource_devices(d) for d in c.devices))
            for c in pod.containers
        ),
    )


def allocatable_to_pb(devices: Iterable[ResourceDevices]) -> pr.AllocatableResourcesResponse:
    return pr.AllocatableResourcesResponse(devices=[_pr_devices(d) for d in devices])


def allocatable_from_pb(response: pr.AllocatableResourcesResponse) -> list[ResourceDevices]:
    return [_resource_devices(d) for d in response.devices]
