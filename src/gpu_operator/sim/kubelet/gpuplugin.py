"""The simulator's own minimal ``nvidia.com/gpu`` device plugin, backed by the node's simulated GPUs.

It exists so simulated nodes can show GPU capacity without the real device plugin agent (which runs as a
DaemonSet pod), and so a thousand nodes can be simulated: as a :class:`~gpu_operator.sim.kubelet.devices.LocalPlugin`
it is called in-process, and with :meth:`SimGpuPlugin.serve` it speaks real gRPC on
``<plugin dir>/nvidia-gpu.sock`` and registers with the node's kubelet socket. Device ids are GPU UUIDs;
health follows the backend's events (a critical XID or a lost GPU makes a device Unhealthy, recovery makes
it Healthy again; application XIDs are ignored as upstream does).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from gpu_operator.agents.deviceplugin.health import DEFAULT_IGNORED_XIDS
from gpu_operator.agents.deviceplugin.response import CDI_KIND
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kubelet.allocation import ContainerAllocation, PluginDevice, allocation_to_pb, devices_to_pb
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME, unix_target
from gpu_operator.kubelet.registration import register
from gpu_operator.names import keys

RESOURCE = keys.GPU_RESOURCE
SOCKET_NAME = "nvidia-gpu.sock"
_grpc_api: Any = dp_grpc


class SimGpuPlugin(dp_grpc.DevicePluginServicer):
    """``nvidia.com/gpu`` over the full GPUs of one simulated node."""

    resource_name = RESOURCE

    def __init__(self, *, backend: GpuBackend) -> None:
        self._backend = backend
        self._gpus = [(d.uuid, d.numa_node) for d in backend.devices()]
        self._unhealthy: set[str] = set()
        self._changed: asyncio.Event | None = None
        self._server: Any = None
        self._plugin_dir: Path | None = None

    # -- health ---------------------------------------------------------------------------------------

    def drain_events(self) -> bool:
        """Apply the backend's pending health events; True when a device's health changed."""
        before = set(self._unhealthy)
        for event in self._backend.wait_health_events(timeout=0):
            if event.lost or (event.xid is not None and event.xid not in DEFAULT_IGNORED_XIDS):
                self._unhealthy.add(event.uuid)
            elif event.recovered:
                self._unhealthy.discard(event.uuid)
        changed = before != self._unhealthy
        if changed and self._changed is not None:
            self._changed.set()
        return changed

    # -- LocalPlugin ----------------------------------------------------------------------------------

    def list_devices(self) -> list[PluginDevice]:
        return [
            PluginDevice(id=uuid, healthy=uuid not in self._unhealthy, numa_nodes=(numa,) if numa is not None else ())
            for uuid, numa in self._gpus
        ]

    def allocate(self, device_ids: Sequence[str]) -> ContainerAllocation:
        known = {uuid for uuid, _ in self._gpus}
        unknown = [i for i in device_ids if i not in known]
        if unknown:
            raise ValueError(f"unknown device ids {unknown}")
        return ContainerAllocation(
            resource_name=RESOURCE,
            device_ids=tuple(device_ids),
            envs={"NVIDIA_VISIBLE_DEVICES": ",".join(device_ids)},
            cdi_devices=tuple(f"{CDI_KIND}={i}" for i in device_ids),
        )

    # -- gRPC -----------------------------------------------------------------------------------------

    async def serve(self, *, plugin_dir: Path) -> None:
        """Listen on ``<plugin_dir>/nvidia-gpu.sock`` and register with the kubelet socket there."""
        self._plugin_dir = plugin_dir
        self._changed = asyncio.Event()
        socket = plugin_dir / SOCKET_NAME
        socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        _grpc_api.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(unix_target(socket))
        await server.start()
        self._server = server
        await self.register()

    async def register(self) -> None:
        assert self._plugin_dir is not None
        await register(
            kubelet_socket=self._plugin_dir / KUBELET_SOCKET_NAME,
            endpoint=SOCKET_NAME,
            resource_name=RESOURCE,
            options=dp.DevicePluginOptions(),
        )

    async def restart(self) -> None:
        """What the NVIDIA plugin does when ``kubelet.sock`` is re-created: restart its server, register again."""
        assert self._plugin_dir is not None
        await self.stop()
        await self.serve(plugin_dir=self._plugin_dir)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0)

    async def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return dp.DevicePluginOptions()

    async def ListAndWatch(self, request: dp.Empty, context: Any) -> AsyncIterator[dp.ListAndWatchResponse]:  # noqa: N802
        assert self._changed is not None
        while True:
            self._changed.clear()
            yield devices_to_pb(self.list_devices())
            await self._changed.wait()

    async def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:  # noqa: N802
        responses = []
        for wanted in request.container_requests:
            try:
                responses.append(allocation_to_pb(self.allocate(list(wanted.devices_ids))))
            except ValueError as error:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        return dp.AllocateResponse(container_responses=responses)

    async def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: Any
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()
