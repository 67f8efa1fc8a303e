"""One gRPC device-plugin server per resource, on a unix socket in the kubelet's plugin directory.

The servicer answers the kubelet from the pure modules: ListAndWatch streams the device list and
re-sends it on every health change (including recovery), Allocate and GetPreferredAllocation use
``response`` and ``allocation``. Asyncio (grpc.aio), so many servers share one event loop; the
manager (``plugin``) starts, registers and restarts them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from gpu_operator.agents.deviceplugin.allocation import AllocationError, Topology, preferred_allocation
from gpu_operator.agents.deviceplugin.health import HealthBook
from gpu_operator.agents.deviceplugin.response import ContainerAllocation, RequestError, allocate
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.agents.shared.resources import Resource, socket_name
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import HEALTHY, UNHEALTHY, unix_target

log = logging.getLogger(__name__)

#: The generated gRPC module has no type information: registration goes through this untyped alias.
_grpc_api: Any = dp_grpc

OPTIONS = dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def _response_pb(out: ContainerAllocation) -> dp.ContainerAllocateResponse:
    return dp.ContainerAllocateResponse(
        envs=out.envs,
        mounts=[
            dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only) for m in out.mounts
        ],
        devices=[
            dp.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in out.devices
        ],
        annotations=out.annotations,
        cdi_devices=[dp.CDIDevice(name=n) for n in out.cdi_devices],
    )


class _Servicer(dp_grpc.DevicePluginServicer):
    def __init__(self, server: ResourceServer) -> None:
        self._s = server

    async def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return OPTIONS

    async def ListAndWatch(self, request: dp.Empty, context: Any) -> AsyncIterator[dp.ListAndWatchResponse]:  # noqa: N802
        seen = -1
        while not self._s.stopping:
            version = self._s.health.version
            if version != seen:
                seen = version
                yield self._s.device_list()
            await self._s.wait_change(seen)

    async def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            try:
                ids = preferred_allocation(
                    devices=self._s.known,
                    topology=self._s.topology,
                    available=list(req.available_deviceIDs),
                    required=list(req.must_include_deviceIDs),
                    size=req.allocation_size,
                    policy=self._s.settings.allocation_policy,
                )
            except AllocationError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:  # noqa: N802
        responses = []
        for req in request.container_requests:
            try:
                out = allocate(
                    settings=self._s.settings,
                    resource=self._s.resource.name,
                    known=self._s.known,
                    requested=list(req.devices_ids),
                )
            except RequestError as exc:
                log.warning("refused Allocate for %s: %s", self._s.resource.name, exc)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            unhealthy = [d for d in req.devices_ids if not self._s.health.healthy(self._s.known[d].physical_uuid)]
            if unhealthy:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"devices are unhealthy: {unhealthy}")
            responses.append(_response_pb(out))
        return dp.AllocateResponse(container_responses=responses)

    async def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: Any
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()


class ResourceServer:
    """Serves one resource (e.g. ``nvidia.com/gpu``) on ``<plugin_dir>/nvidia-<name>.sock``."""

    def __init__(
        self, *, resource: Resource, settings: Settings, health: HealthBook, topology: Topology, plugin_dir: Path
    ) -> None:
        self.resource = resource
        self.settings = settings
        self.health = health
        self.topology = topology
        self.socket = plugin_dir / socket_name(resource.name)
        self.known = {d.id: d for d in resource.devices}
        self.stopping = False
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Event()

    def device_list(self) -> dp.ListAndWatchResponse:
        devices = []
        for d in self.resource.devices:
            topo = dp.TopologyInfo(nodes=[dp.NUMANode(ID=d.numa_node)]) if d.numa_node is not None else None
            health = HEALTHY if self.health.healthy(d.physical_uuid) else UNHEALTHY
            devices.append(dp.Device(ID=d.id, health=health, topology=topo))
        return dp.ListAndWatchResponse(devices=devices)

    def notify(self) -> None:
        """Wake every ListAndWatch stream (health changed or the server is stopping)."""
        self._changed.set()

    async def wait_change(self, seen: int) -> None:
        while not self.stopping and self.health.version == seen:
            self._changed.clear()
            if self.health.version != seen:
                return
            await self._changed.wait()

    async def start(self) -> None:
        self.stopping = False
        self.socket.unlink(missing_ok=True)  # a stale socket or file from a previous run
        server = grpc.aio.server()
        _grpc_api.add_DevicePluginServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(unix_target(self.socket))
        await server.start()
        self._server = server

    async def stop(self) -> None:
        self.stopping = True
        self.notify()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5)
        self.socket.unlink(missing_ok=True)

    @property
    def serving(self) -> bool:
        return self._server is not None and self.socket.exists()
