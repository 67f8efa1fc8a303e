"""The kubelet side of one device plugin: a ``grpc.aio`` client of the plugin's socket.

A kubelet calls ``GetDevicePluginOptions`` right after ``Register``, then keeps one ``ListAndWatch`` stream
open for as long as the plugin lives; each message is the full device list. ``GetPreferredAllocation`` (only
when the options say it is available) is a hint; ``Allocate`` is called once per container that requests
the resource, and has no deadline in the real kubelet (kubernetes/kubernetes#117435) -- callers here pass
one explicitly.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import grpc

from gpu_operator.kubelet.allocation import ContainerAllocation, PluginDevice, allocation_from_pb, devices_from_pb
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import PRE_START_CONTAINER_TIMEOUT_SECONDS, unix_target

#: The generated gRPC module has no type information: calls go through this untyped alias.
_grpc_api: Any = dp_grpc


class DevicePluginError(RuntimeError):
    """A call to a device plugin failed; the message names the plugin, the call and the gRPC status."""


class DevicePluginClient:
    """A connection to the plugin serving ``resource_name`` on ``socket``."""

    def __init__(self, *, socket: Path, resource_name: str) -> None:
        self.socket = socket
        self.resource_name = resource_name
        self._channel: Any = grpc.aio.insecure_channel(unix_target(socket))
        self._stub: Any = _grpc_api.DevicePluginStub(self._channel)

    def _error(self, call: str, error: grpc.RpcError) -> DevicePluginError:
        code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        name = code.name if code is not None else "UNKNOWN"
        return DevicePluginError(f"{self.resource_name} plugin at {self.socket}: {call} failed: {name}: {details}")

    async def options(self, *, timeout: float = 5.0) -> dp.DevicePluginOptions:
        try:
            response: dp.DevicePluginOptions = await self._stub.GetDevicePluginOptions(
                dp.Empty(), timeout=timeout, wait_for_ready=True
            )
        except grpc.RpcError as error:
            raise self._error("GetDevicePluginOptions", error) from error
        return response

    async def list_and_watch(self) -> AsyncGenerator[list[PluginDevice], None]:
        """Every device list the plugin sends, until it ends the stream (raises DevicePluginError on failure)."""
        call = self._stub.ListAndWatch(dp.Empty(), wait_for_ready=True)
        try:
            async for response in call:
                yield devices_from_pb(response)
        except grpc.RpcError as error:
            raise self._error("ListAndWatch", error) from error
        finally:
            call.cancel()

    async def preferred_allocation(
        self, *, available: Sequence[str], must_include: Sequence[str], size: int, timeout: float = 10.0
    ) -> list[str]:
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available), must_include_deviceIDs=list(must_include), allocation_size=size
                )
            ]
        )
        try:
            response: dp.PreferredAllocationResponse = await self._stub.GetPreferredAllocation(request, timeout=timeout)
        except grpc.RpcError as error:
            raise self._error("GetPreferredAllocation", error) from error
        if not response.container_responses:
            return []
        return list(response.container_responses[0].deviceIDs)

    async def allocate(self, *, device_ids: Sequence[str], timeout: float = 30.0) -> ContainerAllocation:
        """Allocate ``device_ids`` for one container."""
        request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=list(device_ids))])
        try:
            response: dp.AllocateResponse = await self._stub.Allocate(request, timeout=timeout)
        except grpc.RpcError as error:
            raise self._error("Allocate", error) from error
        if len(response.container_responses) != 1:
            raise DevicePluginError(
                f"{self.resource_name} plugin at {self.socket}: Allocate answered "
                f"{len(response.container_responses)} container responses for 1 request"
            )
        return allocation_from_pb(
            resource_name=self.resource_name, device_ids=device_ids, response=response.container_responses[0]
        )

    async def pre_start(self, *, device_ids: Sequence[str]) -> None:
        request = dp.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            await self._stub.PreStartContainer(request, timeout=PRE_START_CONTAINER_TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            raise self._error("PreStartContainer", error) from error

    async def close(self) -> None:
        await self._channel.close()
