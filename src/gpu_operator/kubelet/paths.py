"""Constants of the kubelet APIs and the socket paths of one (real or simulated) node.

The kubelet serves ``Registration`` on ``<plugin dir>/kubelet.sock``; each device plugin serves on its own
socket in the same directory and registers the socket's *file name*. The PodResources API listens on
``<pod-resources dir>/kubelet.sock``. :class:`KubeletDirs` places both directories under a host root, so a
simulated node keeps the real layout inside its own directory (``<root>/var/lib/kubelet/...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: The device-plugin API version plugins must send, and the versions this kubelet accepts.
VERSION = "v1beta1"
SUPPORTED_VERSIONS = (VERSION,)
DEVICE_PLUGIN_PATH = PurePosixPath("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH / KUBELET_SOCKET_NAME
POD_RESOURCES_PATH = PurePosixPath("/var/lib/kubelet/pod-resources")
POD_RESOURCES_SOCKET = POD_RESOURCES_PATH / KUBELET_SOCKET_NAME
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PRE_START_CONTAINER_TIMEOUT_SECONDS = 30
#: sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
#: The PodResources reply of a busy node can exceed gRPC's 4 MiB default (dcgm-exporter #509).
POD_RESOURCES_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class SocketPathTooLongError(ValueError):
    """A unix socket path does not fit in ``sun_path``; the message names the path and its length."""


def unix_target(path: Path | str) -> str:
    """The gRPC target ``unix:///abs/path`` for ``path``, refusing paths the kernel cannot bind."""
    absolute = Path(path).absolute()
    size = len(str(absolute).encode())
    if size > MAX_SOCKET_PATH_BYTES:
        raise SocketPathTooLongError(
            f"unix socket path is {size} bytes, more than {MAX_SOCKET_PATH_BYTES}: {absolute} "
            "(use a shorter state or data directory)"
        )
    return f"unix://{absolute}"


def endpoint_name(endpoint: str) -> str:
    """Check a registered endpoint: a plain file name inside the plugin dir (no separators, not ``..``)."""
    if not endpoint or "/" in endpoint or endpoint in {".", ".."} or endpoint == KUBELET_SOCKET_NAME:
        raise ValueError(f"invalid device-plugin endpoint {endpoint!r}: must be a socket file name in the plugin dir")
    return endpoint


@dataclass(frozen=True, kw_only=True)
class KubeletDirs:
    """The kubelet directories of one node, below ``root`` ("/" on a real node)."""

    root: Path

    def host_path(self, path: PurePosixPath | str) -> Path:
        """``path`` (absolute on the node) inside the root."""
        return self.root / str(path).lstrip("/")

    @property
    def plugin_dir(self) -> Path:
        return self.host_path(DEVICE_PLUGIN_PATH)

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET_NAME

    @property
    def pod_resources_dir(self) -> Path:
        return self.host_path(POD_RESOURCES_PATH)

    @property
    def pod_resources_socket(self) -> Path:
        return self.pod_resources_dir / KUBELET_SOCKET_NAME

    def create(self) -> KubeletDirs:
        """Create both directories (mode 0750 like the kubelet) and return self."""
        for directory in (self.plugin_dir, self.pod_resources_dir):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o750)
        return self
