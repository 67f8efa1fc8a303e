"""The PodResources API v1: the kubelet's ``PodResourcesLister`` server and a client.

The server answers from a :class:`PodResourcesSource` (the simulated kubelet's allocation table), so it
always reports the current assignment; ``Get`` answers ``NOT_FOUND`` for an unknown pod like the kubelet.
Clients raise their receive limit above gRPC's 4 MiB default, which a busy node's ``List`` can exceed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpu_operator.kubelet.allocation import (
    PodDevices,
    ResourceDevices,
    allocatable_from_pb,
    allocatable_to_pb,
    pod_to_pb,
    pods_from_pb,
    pods_to_pb,
)
from gpu_operator.kubelet.api.podresources.v1 import podresources_pb2 as pr
from gpu_operator.kubelet.api.podresources.v1 import podresources_pb2_grpc as pr_grpc
from gpu_operator.kubelet.paths import POD_RESOURCES_MAX_MESSAGE_BYTES, unix_target

#: The generated gRPC module has no type information: calls go through this untyped alias.
_grpc_api: Any = pr_grpc
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", POD_RESOURCES_MAX_MESSAGE_BYTES)]


class PodResourcesSource(Protocol):
    """Where the server reads the node's assignments from."""

    def pod_devices(self) -> Sequence[PodDevices]:
        """Every pod with its containers' devices."""
        ...

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        """Every healthy device the node can assign, per resource."""
        ...


class _Servicer(pr_grpc.PodResourcesListerServicer):
    def __init__(self, source: PodResourcesSource) -> None:
        self._source = source

    async def List(self, request: pr.ListPodResourcesRequest, context: Any) -> pr.ListPodResourcesResponse:  # noqa: N802
        return pods_to_pb(self._source.pod_devices())

    async def GetAllocatableResources(  # noqa: N802
        self, request: pr.AllocatableResourcesRequest, context: Any
    ) -> pr.AllocatableResourcesResponse:
        return allocatable_to_pb(self._source.allocatable_devices())

    async def Get(self, request: pr.GetPodResourcesRequest, context: Any) -> pr.GetPodResourcesResponse:  # noqa: N802
        for pod in self._source.pod_devices():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pr.GetPodResourcesResponse(pod_resources=pod_to_pb(pod))
        await context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")
        raise AssertionError("unreachable")  # abort raises


class PodResourcesServer:
    """``PodResourcesLister`` on ``socket`` (``grpc.aio``, in the running loop)."""

    def __init__(self, *, socket: Path, source: PodResourcesSource) -> None:
        self.socket = socket
        self._source = source
        self._server: Any = None

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"pod-resources server on {self.socket} already started")
        target = unix_target(self.socket)
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        _grpc_api.add_PodResourcesListerServicer_to_server(_Servicer(self._source), server)
        server.add_insecure_port(target)
        await server.start()
        self._server = server

    async def stop(self, *, grace: float | None = None) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        self.socket.unlink(missing_ok=True)


async def list_pod_resources(*, socket: Path, timeout: float = 10.0) -> list[PodDevices]:
    """Client: ``List`` over ``grpc.aio``."""
    async with grpc.aio.insecure_channel(unix_target(socket), options=_CHANNEL_OPTIONS) as channel:
        response = await _grpc_api.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=timeout, wait_for_ready=True
        )
    return pods_from_pb(response)


async def allocatable_resources(*, socket: Path, timeout: float = 10.0) -> list[ResourceDevices]:
    """Client: ``GetAllocatableResources`` over ``grpc.aio``."""
    async with grpc.aio.insecure_channel(unix_target(socket), options=_CHANNEL_OPTIONS) as channel:
        response = await _grpc_api.PodResourcesListerStub(channel).GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=timeout, wait_for_ready=True
        )
    return allocatable_from_pb(response)


def list_pod_resources_blocking(*, socket: Path, timeout: float = 10.0) -> list[PodDevices]:
    """Client: ``List`` with synchronous gRPC (for threads and tests)."""
    with grpc.insecure_channel(unix_target(socket), options=_CHANNEL_OPTIONS) as channel:
        response = _grpc_api.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=timeout, wait_for_ready=True
        )
    return pods_from_pb(response)


def allocatable_resources_blocking(*, socket: Path, timeout: float = 10.0) -> list[ResourceDevices]:
    """Client: ``GetAllocatableResources`` with synchronous gRPC."""
    with grpc.insecure_channel(unix_target(socket), options=_CHANNEL_OPTIONS) as channel:
        response = _grpc_api.PodResourcesListerStub(channel).GetAllocatableResources(
            pr.AllocatableResourcesRequest(), timeout=timeout, wait_for_ready=True
        )
    return allocatable_from_pb(response)
