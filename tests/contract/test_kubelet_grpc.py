"""The kubelet gRPC helpers over real unix sockets, in one event loop: registration (accepted and rejected),
the kubelet-side plugin client against a plugin written here, and the PodResources server and clients."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpu_operator.kubelet.allocation import (
    ContainerAllocation,
    ContainerDevices,
    MountSpec,
    PluginDevice,
    PodDevices,
    ResourceDevices,
    allocation_to_pb,
    devices_to_pb,
)
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import KubeletDirs, SocketPathTooLongError, unix_target
from gpu_operator.kubelet.plugin_client import DevicePluginClient, DevicePluginError
from gpu_operator.kubelet.podresources import (
    PodResourcesServer,
    allocatable_resources,
    allocatable_resources_blocking,
    list_pod_resources,
    list_pod_resources_blocking,
)
from gpu_operator.kubelet.registration import RegistrationError, RegistrationServer, check_resource_name, register

_api: Any = dp_grpc


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kt-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Plugin(dp_grpc.DevicePluginServicer):
    def __init__(self) -> None:
        self.allocated: list[list[str]] = []
        self.updates: asyncio.Queue[list[PluginDevice]] = asyncio.Queue()

    async def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: dp.Empty, context: Any) -> AsyncIterator[dp.ListAndWatchResponse]:  # noqa: N802
        while True:
            yield devices_to_pb(await self.updates.get())

    async def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        wanted = request.container_requests[0]
        ids = sorted(wanted.available_deviceIDs, reverse=True)[: wanted.allocation_size]
        return dp.PreferredAllocationResponse(
            container_responses=[dp.ContainerPreferredAllocationResponse(deviceIDs=ids)]
        )

    async def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:  # noqa: N802
        ids = list(request.container_requests[0].devices_ids)
        if "bad" in ids:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown device bad")
        self.allocated.append(ids)
        answer = ContainerAllocation(
            resource_name="example.com/dev",
            device_ids=tuple(ids),
            envs={"VISIBLE": ",".join(ids)},
            mounts=(MountSpec(container_path="/dev/x", host_path="/dev/null", read_only=True),),
            cdi_devices=tuple(f"example.com/dev={i}" for i in ids),
        )
        return dp.AllocateResponse(container_responses=[allocation_to_pb(answer)])


async def _serve_plugin(socket: Path, plugin: _Plugin) -> Any:
    server = grpc.aio.server()
    _api.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(unix_target(socket))
    await server.start()
    return server


def test_registration_accepts_and_rejects(short_dir: Path) -> None:
    dirs = KubeletDirs(root=short_dir).create()
    seen: list[dp.RegisterRequest] = []

    async def on_register(request: dp.RegisterRequest) -> None:
        seen.append(request)

    async def scenario() -> str:
        server = RegistrationServer(plugin_dir=dirs.plugin_dir, on_register=on_register)
        await server.start()
        try:
            assert dirs.kubelet_socket.is_socket()
            await register(kubelet_socket=dirs.kubelet_socket, endpoint="p.sock", resource_name="example.com/dev")
            with pytest.raises(grpc.aio.AioRpcError) as rejected:
                await register(kubelet_socket=dirs.kubelet_socket, endpoint="p.sock", resource_name="gpu")
            return str(rejected.value.details())
        finally:
            await server.stop()

    details = asyncio.run(scenario())
    assert [(r.version, r.endpoint, r.resource_name) for r in seen] == [("v1beta1", "p.sock", "example.com/dev")]
    assert "invalid resource name 'gpu'" in details
    assert not dirs.kubelet_socket.exists()


@pytest.mark.parametrize("name", ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "example.com/a_b"])
def test_resource_names_accepted(name: str) -> None:
    assert check_resource_name(name) == name


@pytest.mark.parametrize("name", ["gpu", "kubernetes.io/gpu", "x.k8s.io/gpu", "nvidia.com/", "Nvidia.com/gpu"])
def test_resource_names_rejected(name: str) -> None:
    with pytest.raises(RegistrationError):
        check_resource_name(name)


def test_socket_path_limit() -> None:
    with pytest.raises(SocketPathTooLongError, match="more than 107"):
        unix_target("/tmp/" + "x" * 120)


def test_plugin_client_round_trip(short_dir: Path) -> None:
    socket = short_dir / "p.sock"

    async def scenario() -> tuple[list[list[PluginDevice]], list[str], ContainerAllocation, str]:
        plugin = _Plugin()
        server = await _serve_plugin(socket, plugin)
        client = DevicePluginClient(socket=socket, resource_name="example.com/dev")
        try:
            options = await client.options()
            assert options.get_preferred_allocation_available
            lists: list[list[PluginDevice]] = []
            stream = client.list_and_watch()
            await plugin.updates.put([PluginDevice(id="a", numa_nodes=(0,)), PluginDevice(id="b")])
            lists.append(await anext(stream))
            await plugin.updates.put([PluginDevice(id="a", healthy=False), PluginDevice(id="b")])
            lists.append(await anext(stream))
            await stream.aclose()
            preferred = await client.preferred_allocation(available=["a", "b", "c"], must_include=[], size=2)
            allocation = await client.allocate(device_ids=["a"])
            with pytest.raises(DevicePluginError) as failed:
                await client.allocate(device_ids=["bad"])
            with pytest.raises(DevicePluginError, match="PreStartContainer failed: UNIMPLEMENTED"):
                await client.pre_start(device_ids=["a"])  # a plugin without it answers UNIMPLEMENTED
            return lists, preferred, allocation, str(failed.value)
        finally:
            await client.close()
            await server.stop(None)

    lists, preferred, allocation, failure = asyncio.run(scenario())
    assert lists == [
        [PluginDevice(id="a", numa_nodes=(0,)), PluginDevice(id="b")],
        [PluginDevice(id="a", healthy=False), PluginDevice(id="b")],
    ]
    assert preferred == ["c", "b"]
    assert allocation.envs == {"VISIBLE": "a"}
    assert allocation.cdi_devices == ("example.com/dev=a",)
    assert allocation.mounts == (MountSpec(container_path="/dev/x", host_path="/dev/null", read_only=True),)
    assert "Allocate failed: INVALID_ARGUMENT: unknown device bad" in failure


class _Source:
    def pod_devices(self) -> list[PodDevices]:
        gpu = ResourceDevices(resource_name="nvidia.com/gpu", device_ids=("GPU-1",), numa_nodes=(1,))
        return [PodDevices(namespace="ns", name="p", containers=(ContainerDevices(name="c", devices=(gpu,)),))]

    def allocatable_devices(self) -> list[ResourceDevices]:
        return [ResourceDevices(resource_name="nvidia.com/gpu", device_ids=("GPU-1", "GPU-2"))]


def test_pod_resources_server_and_clients(short_dir: Path) -> None:
    dirs = KubeletDirs(root=short_dir).create()

    async def scenario() -> tuple[list[PodDevices], list[ResourceDevices], list[PodDevices], list[ResourceDevices]]:
        server = PodResourcesServer(socket=dirs.pod_resources_socket, source=_Source())
        await server.start()
        try:
            listed = await list_pod_resources(socket=dirs.pod_resources_socket)
            allocatable = await allocatable_resources(socket=dirs.pod_resources_socket)
            # The blocking clients run in a thread: the server lives in this loop.
            blocking = await asyncio.to_thread(list_pod_resources_blocking, socket=dirs.pod_resources_socket)
            blocking_alloc = await asyncio.to_thread(allocatable_resources_blocking, socket=dirs.pod_resources_socket)
            return listed, allocatable, blocking, blocking_alloc
        finally:
            await server.stop()

    listed, allocatable, blocking, blocking_alloc = asyncio.run(scenario())
    assert listed == blocking == _Source().pod_devices()
    assert allocatable == blocking_alloc == _Source().allocatable_devices()
