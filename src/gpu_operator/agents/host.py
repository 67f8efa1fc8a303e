"""The agent context on a real node: the container's own environment, paths and in-cluster API.

``gpu-operator agent NAME`` builds a :class:`HostContext` and runs the program. Paths are the
container's (host directories arrive through hostPath mounts, under ``HOST_ROOT``, default ``/host``
for the host's root as upstream operands mount it), the GPU backend is opened once (NVML when the
driver is there), and the Node is read and patched through ``kube.nodeaccess`` with the pod's service account.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kube.nodeaccess import LightkubeNode

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


_MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup


def resolve_under(root: Path, node_path: str) -> Path:
    """``node_path`` of the host mounted at ``root``, its symlinks followed as the host would follow
    them: an absolute target (``/var/run`` -> ``/run``) starts again at ``root``, never at this
    container's ``/``, and ``..`` never leaves ``root``. Parts that do not exist are kept as given."""
    pending = [part for part in node_path.split("/") if part and part != "."]
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if not candidate.is_symlink():
            resolved.append(part)
            continue
        hops += 1
        if hops > _MAX_LINKS:
            raise OSError(f"too many levels of symbolic links under {root} resolving {node_path}")
        target = str(candidate.readlink())
        if target.startswith("/"):
            resolved = []
        pending = [p for p in target.split("/") if p and p != "."] + pending
    return root.joinpath(*resolved)


@dataclass
class HostContext:
    """AgentContext for a program running in a real container."""

    gpu: GpuBackend
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    node: LightkubeNode | None = None
    cluster: Any = None  # a NodeCluster for the driver and MIG managers (kube.nodecluster)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: bool = False

    @property
    def node_name(self) -> str:
        return self.env.get("NODE_NAME", "")

    @property
    def plugin_dir(self) -> Path:
        return Path(self.env.get("KUBELET_PLUGIN_DIR", PLUGIN_DIR))

    def path(self, container_path: str) -> Path:
        return Path(container_path)

    def host_path(self, node_path: str) -> Path:
        return resolve_under(Path(self.env.get("HOST_ROOT", "/host")), node_path)

    def set_ready(self, ready: bool = True) -> None:
        # A readiness probe can check this file (exec: test -f).
        self.ready = ready
        marker = Path(self.env.get("READY_FILE", "/run/gpu-operator-agent.ready"))
        try:
            if ready:
                marker.touch()
            else:
                marker.unlink(missing_ok=True)
        except OSError:
            pass

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)

    async def sleep(self, seconds: float | None) -> bool:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True
