"""The kubelet's device manager for one simulated node.

* Serves ``Registration`` on ``<plugin dir>/kubelet.sock`` and ``PodResourcesLister`` on
  ``<pod-resources dir>/kubelet.sock`` (real gRPC, ``grpc.aio`` in the simulator's loop).
* On ``Register`` it dials the plugin's socket, reads its options and keeps its ``ListAndWatch`` stream;
  every list updates the Node: capacity = all devices, allocatable = healthy ones. When a stream fails the
  resource's allocatable drops to 0 and, like the kubelet, nothing retries: the plugin must re-register.
* Allocation at pod admission: free healthy devices, the plugin's ``GetPreferredAllocation`` when it offers
  it (a hint, checked), then ``Allocate``; the table survives kubelet restarts (the kubelet checkpoints it).
* A kubelet restart stops both servers, removes every socket in the plugin dir, zeroes allocatable (capacity
  stays) and serves again, so plugins have to notice and re-register.
* In-process endpoints (:class:`LocalPlugin`) skip gRPC for nodes simulated at scale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpu_operator.kubelet.allocation import (
    ContainerAllocation,
    ContainerDevices,
    PluginDevice,
    PodDevices,
    ResourceDevices,
)
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME, KubeletDirs
from gpu_operator.kubelet.plugin_client import DevicePluginClient, DevicePluginError
from gpu_operator.kubelet.podresources import PodResourcesServer
from gpu_operator.kubelet.registration import RegistrationServer

log = logging.getLogger(__name__)
#: resource -> (capacity, allocatable); None removes the resource from the Node.
CapacityCallback = Callable[[dict[str, tuple[int, int] | None]], Awaitable[None]]


class AdmissionError(RuntimeError):
    """A pod cannot be admitted: its device request cannot be met (reported as UnexpectedAdmissionError)."""


class LocalPlugin(Protocol):
    """A device plugin called in-process (no sockets)."""

    resource_name: str

    def list_devices(self) -> list[PluginDevice]: ...

    def allocate(self, device_ids: Sequence[str]) -> ContainerAllocation: ...


@dataclass(kw_only=True)
class Endpoint:
    resource_name: str
    client: DevicePluginClient | None = None
    local: LocalPlugin | None = None
    options: dp.DevicePluginOptions = field(default_factory=dp.DevicePluginOptions)
    devices: list[PluginDevice] = field(default_factory=list)
    connected: bool = True
    task: asyncio.Task[None] | None = None

    def healthy(self) -> list[str]:
        return [d.id for d in self.devices if d.healthy] if self.connected else []


@dataclass(kw_only=True)
class PodEntry:
    namespace: str
    name: str
    containers: dict[str, list[ContainerAllocation]] = field(default_factory=dict)


class DeviceManager:
    """Device plugins and device assignments of one node."""

    def __init__(self, *, node_name: str, dirs: KubeletDirs, on_capacity: CapacityCallback, serve: bool) -> None:
        self.node_name = node_name
        self.dirs = dirs
        self.serve = serve
        self._on_capacity = on_capacity
        self._endpoints: dict[str, Endpoint] = {}
        self._pods: dict[str, PodEntry] = {}
        self._registration = RegistrationServer(plugin_dir=dirs.plugin_dir, on_register=self._register)
        self._pod_resources = PodResourcesServer(socket=dirs.pod_resources_socket, source=self)
        #: Registrations accepted so far (tests and faults look at it).
        self.registrations = 0

    async def start(self) -> None:
        if self.serve:
            self.dirs.create()
            await self._registration.start()
            await self._pod_resources.start()

    async def stop(self) -> None:
        for endpoint in list(self._endpoints.values()):
            await self._disconnect(endpoint)
        if self.serve:
            await self._registration.stop(grace=0)
            await self._pod_resources.stop(grace=0)

    async def restart_kubelet(self) -> None:
        """What a kubelet restart does to device plugins (see the module docstring)."""
        if not self.serve:
            return
        await self._registration.stop(grace=0)
        await self._pod_resources.stop(grace=0)
        for endpoint in [e for e in self._endpoints.values() if e.local is None]:
            await self._disconnect(endpoint)
        for entry in self.dirs.plugin_dir.iterdir():
            if entry.is_socket() or entry.name == KUBELET_SOCKET_NAME:
                entry.unlink(missing_ok=True)
        await self._publish()
        await self._registration.start()
        await self._pod_resources.start()

    # -- plugins ------------------------------------------------------------------------------------

    async def _register(self, request: dp.RegisterRequest) -> None:
        old = self._endpoints.get(request.resource_name)
        if old is not None:
            await self._disconnect(old)
        client = DevicePluginClient(socket=self.dirs.plugin_dir / request.endpoint, resource_name=request.resource_name)
        endpoint = Endpoint(resource_name=request.resource_name, client=client, options=request.options)
        if old is not None:
            endpoint.devices = old.devices  # capacity stays until the new list arrives
        self._endpoints[request.resource_name] = endpoint
        self.registrations += 1
        endpoint.task = asyncio.create_task(self._watch(endpoint), name=f"law-{self.node_name}-{request.resource_name}")
        log.info("node %s: %s registered (endpoint %s)", self.node_name, request.resource_name, request.endpoint)

    async def _watch(self, endpoint: Endpoint) -> None:
        assert endpoint.client is not None
        try:
            endpoint.options = await endpoint.client.options()
            async for devices in endpoint.client.list_and_watch():
                endpoint.devices = devices
                await self._publish()
        except DevicePluginError as error:
            log.warning("node %s: %s", self.node_name, error)
        # The stream ended or failed: allocatable 0, no retry (the plugin must register again).
        endpoint.connected = False
        await self._publish()

    async def _disconnect(self, endpoint: Endpoint) -> None:
        endpoint.connected = False
        task, endpoint.task = endpoint.task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if endpoint.client is not None:
            await endpoint.client.close()

    async def attach_local(self, plugin: LocalPlugin, *, publish: bool = True) -> None:
        """Serve ``plugin.resource_name`` in-process; ``publish=False`` when the Node is not created yet."""
        endpoint = Endpoint(resource_name=plugin.resource_name, local=plugin, devices=plugin.list_devices())
        self._endpoints[plugin.resource_name] = endpoint
        if publish:
            await self._publish()

    async def refresh_local(self) -> None:
        """Re-read the in-process plugins' device lists (after a GPU fault)."""
        for endpoint in self._endpoints.values():
            if endpoint.local is not None:
                endpoint.devices = endpoint.local.list_devices()
        await self._publish()

    def capacity(self) -> dict[str, tuple[int, int]]:
        return {name: (len(endpoint.devices), len(endpoint.healthy())) for name, endpoint in self._endpoints.items()}

    async def _publish(self) -> None:
        await self._on_capacity(dict(self.capacity()))

    def resources(self) -> set[str]:
        return set(self._endpoints)

    # -- allocation ---------------------------------------------------------------------------------

    async def admit(self, *, pod_uid: str, namespace: str, pod_name: str, requests: dict[str, dict[str, int]]) -> None:
        """Allocate every container's device requests (container -> resource -> count), or none of them.

        A resource no plugin here serves is left alone: the kubelet admits extended resources advertised by
        something other than a device plugin.
        """
        try:
            for container, wanted in requests.items():
                for resource, count in wanted.items():
                    if resource in self._endpoints:
                        await self.allocate(
                            pod_uid=pod_uid,
                            namespace=namespace,
                            pod_name=pod_name,
                            container=container,
                            resource=resource,
                            count=count,
                        )
        except AdmissionError:
            self.release(pod_uid)
            raise

    async def allocate(
        self, *, pod_uid: str, namespace: str, pod_name: str, container: str, resource: str, count: int
    ) -> ContainerAllocation:
        endpoint = self._endpoints[resource]
        taken = {
            i for pod in self._pods.values() for allocs in pod.containers.values() for a in allocs for i in a.device_ids
        }
        free = [i for i in endpoint.healthy() if i not in taken]
        if len(free) < count:
            raise AdmissionError(
                f"Allocate failed due to requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(free)}"
            )
        chosen = free[:count]
        try:
            if endpoint.local is not None:
                allocation = endpoint.local.allocate(chosen)
            else:
                assert endpoint.client is not None
                if endpoint.options.get_preferred_allocation_available:
                    preferred = await endpoint.client.preferred_allocation(available=free, must_include=[], size=count)
                    if len(preferred) == count and set(preferred) <= set(free):
                        chosen = preferred
                allocation = await endpoint.client.allocate(device_ids=chosen)
        except DevicePluginError as error:
            raise AdmissionError(str(error)) from error
        entry = self._pods.setdefault(pod_uid, PodEntry(namespace=namespace, name=pod_name))
        entry.containers.setdefault(container, []).append(allocation)
        return allocation

    def allocations(self, *, pod_uid: str, container: str) -> list[ContainerAllocation]:
        entry = self._pods.get(pod_uid)
        return list(entry.containers.get(container, [])) if entry is not None else []

    async def pre_start(self, *, pod_uid: str, container: str) -> None:
        """``PreStartContainer`` on every plugin that asked for it, before each start of ``container``."""
        for allocation in self.allocations(pod_uid=pod_uid, container=container):
            endpoint = self._endpoints.get(allocation.resource_name)
            if endpoint is not None and endpoint.client is not None and endpoint.options.pre_start_required:
                await endpoint.client.pre_start(device_ids=allocation.device_ids)

    def release(self, pod_uid: str) -> None:
        self._pods.pop(pod_uid, None)

    # -- PodResources source ------------------------------------------------------------------------

    def pod_devices(self) -> list[PodDevices]:
        return [
            PodDevices(
                namespace=entry.namespace,
                name=entry.name,
                containers=tuple(
                    ContainerDevices(
                        name=name,
                        devices=tuple(
                            ResourceDevices(resource_name=a.resource_name, device_ids=a.device_ids) for a in allocs
                        ),
                    )
                    for name, allocs in entry.containers.items()
                ),
            )
            for entry in self._pods.values()
        ]

    def allocatable_devices(self) -> list[ResourceDevices]:
        return [
            ResourceDevices(resource_name=name, device_ids=tuple(endpoint.healthy()))
            for name, endpoint in sorted(self._endpoints.items())
        ]
