"""One gRPC device-plugin server per :class:`PluginSource`, for the network device plugins.

A source says what one resource advertises (``devices()``) and what a container gets (``allocate``); this
module turns it into the kubelet's ``DevicePlugin`` service on ``<plugin dir>/<endpoint>`` (grpc.aio, so
all resources share the agent's event loop). ListAndWatch sends the full list, then again whenever
:meth:`SourceServer.refresh` sees a different one. Allocate answers per container request: ids the list
does not hold and :class:`AllocateError` are ``INVALID_ARGUMENT``, any other failure is ``INTERNAL``
(logged). ``netplugin`` starts, registers and replaces these servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpu_operator.kubelet.allocation import ContainerAllocation, PluginDevice, allocation_to_pb, devices_to_pb
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import unix_target

log = logging.getLogger(__name__)

#: The generated gRPC module has no type information: registration goes through this untyped alias.
_grpc_api: Any = dp_grpc

#: Neither network plugin asks for PreStartContainer or offers a preferred allocation (both upstreams agree).
OPTIONS = dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=False)


class AllocateError(ValueError):
    """A request a source refuses; the kubelet gets the message with ``INVALID_ARGUMENT``."""


class PluginSource(Protocol):
    """What one resource of a network device plugin advertises and hands out."""

    @property
    def resource_name(self) -> str:
        """The extended resource, e.g. ``rdma/rdma_shared_device_a`` or ``nvidia.com/sriov_a``."""
        ...

    @property
    def endpoint(self) -> str:
        """The socket's file name in the kubelet plugin directory."""
        ...

    def devices(self) -> Sequence[PluginDevice]:
        """The devices to advertise now (called often: keep it cheap, discover in the loader)."""
        ...

    def allocate(self, *, device_ids: Sequence[str]) -> ContainerAllocation:
        """What one container gets for ``device_ids`` (ids the list holds); AllocateError to refuse."""
        ...


class _Servicer(dp_grpc.DevicePluginServicer):
    def __init__(self, server: SourceServer) -> None:
        self._s = server

    async def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return OPTIONS

    async def ListAndWatch(self, request: dp.Empty, context: Any) -> AsyncIterator[dp.ListAndWatchResponse]:  # noqa: N802
        seen = -1
        while not self._s.stopping:
            if self._s.version != seen:
                seen = self._s.version
                yield devices_to_pb(self._s.devices)
            await self._s.wait_change(seen)

    async def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        # Not offered (OPTIONS); a kubelet that asks anyway gets no preference.
        return dp.PreferredAllocationResponse(
            container_responses=[dp.ContainerPreferredAllocationResponse() for _ in request.container_requests]
        )

    async def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:  # noqa: N802
        responses = []
        for req in request.container_requests:
            status, message, out = self._s.allocate(list(req.devices_ids))
            if out is None:
                await context.abort(status, message)
            else:
                responses.append(out)
        return dp.AllocateResponse(container_responses=responses)

    async def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: Any
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()


class SourceServer:
    """Serves one source on ``<plugin_dir>/<source.endpoint>``."""

    def __init__(self, *, source: PluginSource, plugin_dir: Path) -> None:
        self.source = source
        self.socket = plugin_dir / source.endpoint
        self.devices: tuple[PluginDevice, ...] = tuple(source.devices())
        self.version = 0  # bumped on every list change: the streams compare it
        self.stopping = False
        self._server: grpc.aio.Server | None = None
        self._inode: int | None = None
        self._changed = asyncio.Event()

    @property
    def resource_name(self) -> str:
        return self.source.resource_name

    def update(self, source: PluginSource) -> bool:
        """Serve ``source`` from now on (same resource and endpoint); True when the device list changed."""
        self.source = source
        return self.refresh()

    def refresh(self) -> bool:
        """Re-read the source's devices; push them to the streams when they differ (True)."""
        devices = tuple(self.source.devices())
        if devices == self.devices:
            return False
        self.devices = devices
        self.version += 1
        self._changed.set()
        return True

    def allocate(self, device_ids: list[str]) -> tuple[grpc.StatusCode, str, dp.ContainerAllocateResponse | None]:
        """One container's answer, or the status and message to abort the call with."""
        known = {d.id for d in self.devices}
        unknown = [i for i in device_ids if i not in known]
        if unknown:
            message = f"{self.resource_name}: unknown device ids {unknown} (advertised: {sorted(known)})"
            log.warning("refused Allocate: %s", message)
            return grpc.StatusCode.INVALID_ARGUMENT, message, None
        try:
            allocation = self.source.allocate(device_ids=device_ids)
        except AllocateError as error:
            log.warning("refused Allocate for %s: %s", self.resource_name, error)
            return grpc.StatusCode.INVALID_ARGUMENT, f"{self.resource_name}: {error}", None
        except Exception as error:  # a bug or an I/O error must not kill the server
            log.exception("Allocate for %s failed", self.resource_name)
            return grpc.StatusCode.INTERNAL, f"{self.resource_name}: {type(error).__name__}: {error}", None
        return grpc.StatusCode.OK, "", allocation_to_pb(allocation)

    async def wait_change(self, seen: int) -> None:
        while not self.stopping and self.version == seen:
            self._changed.clear()
            await self._changed.wait()

    async def start(self) -> None:
        self.stopping = False
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)  # a stale socket from a previous run
        server = grpc.aio.server()
        _grpc_api.add_DevicePluginServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(unix_target(self.socket))
        await server.start()
        self._server = server
        self._inode = _inode(self.socket)

    async def stop(self) -> None:
        self.stopping = True
        self._changed.set()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5)
        # Only our own socket: a newer plugin instance may already serve on the same path.
        if self._inode is not None and _inode(self.socket) == self._inode:
            self.socket.unlink(missing_ok=True)
        self._inode = None

    @property
    def serving(self) -> bool:
        """Started, and the socket is still ours (a kubelet restart deletes it)."""
        return self._server is not None and self._inode is not None and _inode(self.socket) == self._inode


def _inode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None
