"""The device-plugin ``Registration`` service: the kubelet's server and the plugin's call.

:class:`RegistrationServer` is what a kubelet serves on ``<plugin dir>/kubelet.sock`` (``grpc.aio``, in the
caller's event loop): it checks each ``RegisterRequest`` like the kubelet (supported version, endpoint is a
socket file name in the plugin dir, an extended resource name) and hands it to an async callback; a
rejected request answers ``INVALID_ARGUMENT`` with the reason. :func:`register` and
:func:`register_blocking` are the plugin side.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME, SUPPORTED_VERSIONS, VERSION, endpoint_name, unix_target

RegisterHandler = Callable[[dp.RegisterRequest], Awaitable[None]]

#: The generated gRPC module has no type information: calls go through this untyped alias.
_grpc_api: Any = dp_grpc
_QUALIFIED = re.compile(
    r"^(?P<domain>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)/(?P<name>[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$"
)
#: Extended resources may not live in the kubernetes.io namespaces (those are the native resources).
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")


class RegistrationError(ValueError):
    """A RegisterRequest the kubelet rejects; the message says why."""


def check_resource_name(name: str) -> str:
    """``name`` is an extended resource name such as ``nvidia.com/gpu`` (raises RegistrationError)."""
    match = _QUALIFIED.match(name)
    if match is None or len(match["name"]) > 63 or len(match["domain"]) > 253:
        raise RegistrationError(f"invalid resource name {name!r}: expected DOMAIN/NAME, e.g. nvidia.com/gpu")
    domain = match["domain"]
    if any(domain == d or domain.endswith(f".{d}") for d in _RESERVED_DOMAINS):
        raise RegistrationError(f"invalid resource name {name!r}: the {domain} domain is reserved")
    return name


def check_request(request: dp.RegisterRequest) -> None:
    """Validate a RegisterRequest the way the kubelet does (raises RegistrationError)."""
    if request.version not in SUPPORTED_VERSIONS:
        raise RegistrationError(
            f"unsupported device-plugin API version {request.version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})"
        )
    try:
        endpoint_name(request.endpoint)
    except ValueError as error:
        raise RegistrationError(str(error)) from error
    check_resource_name(request.resource_name)


class _Servicer(dp_grpc.RegistrationServicer):
    def __init__(self, handler: RegisterHandler) -> None:
        self._handler = handler

    async def Register(self, request: dp.RegisterRequest, context: Any) -> dp.Empty:  # noqa: N802 (gRPC name)
        try:
            check_request(request)
            await self._handler(request)
        except RegistrationError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        return dp.Empty()


class RegistrationServer:
    """The kubelet's Registration server on ``<plugin_dir>/kubelet.sock``."""

    def __init__(self, *, plugin_dir: Path, on_register: RegisterHandler) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET_NAME
        self._on_register = on_register
        self._server: Any = None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen (creating the plugin dir; a stale socket is replaced) and serve in the running loop."""
        if self._server is not None:
            raise RuntimeError(f"registration server on {self.socket} already started")
        target = unix_target(self.socket)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        _grpc_api.add_RegistrationServicer_to_server(_Servicer(self._on_register), server)
        server.add_insecure_port(target)
        await server.start()
        self._server = server

    async def stop(self, *, grace: float | None = None) -> None:
        """Stop serving; grpc removes the socket file."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        self.socket.unlink(missing_ok=True)


def _request(*, endpoint: str, resource_name: str, options: dp.DevicePluginOptions | None) -> dp.RegisterRequest:
    return dp.RegisterRequest(
        version=VERSION,
        endpoint=endpoint_name(endpoint),
        resource_name=resource_name,
        options=options or dp.DevicePluginOptions(),
    )


async def register(
    *,
    kubelet_socket: Path,
    endpoint: str,
    resource_name: str,
    options: dp.DevicePluginOptions | None = None,
    timeout: float = 5.0,
) -> None:
    """Plugin side: register ``resource_name`` served on ``<plugin dir>/<endpoint>`` (grpc.aio).

    Waits up to ``timeout`` seconds for the kubelet socket to answer, like the NVIDIA plugin's blocking dial.
    """
    request = _request(endpoint=endpoint, resource_name=resource_name, options=options)
    async with grpc.aio.insecure_channel(unix_target(kubelet_socket)) as channel:
        stub = _grpc_api.RegistrationStub(channel)
        await stub.Register(request, timeout=timeout, wait_for_ready=True)


def register_blocking(
    *,
    kubelet_socket: Path,
    endpoint: str,
    resource_name: str,
    options: dp.DevicePluginOptions | None = None,
    timeout: float = 5.0,
) -> None:
    """:func:`register` for plugins that run in threads (synchronous gRPC)."""
    request = _request(endpoint=endpoint, resource_name=resource_name, options=options)
    with grpc.insecure_channel(unix_target(kubelet_socket)) as channel:
        stub = _grpc_api.RegistrationStub(channel)
        stub.Register(request, timeout=timeout, wait_for_ready=True)
