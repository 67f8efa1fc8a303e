"""What a program (an agent) running in a simulated container sees: :class:`ProgramContext`.

A real agent reads its environment, files under mounted volumes, the host's ``/`` (through hostPath
mounts), the kubelet's sockets and the GPU. In the simulator all of that is per node and per container, so
one process can run the same agent for many nodes: the context carries the env (downward API values
resolved), the container's mounts mapped to directories on this machine (``ctx.path("/etc/x")``), the
node's host root, kubelet plugin dir and PodResources socket, its GPU backend and the device-plugin
allocations of this container.

It provides what ``gpu_operator.agents.runtime.AgentContext`` asks for (``node`` gives the Node's labels),
so agent programs run unchanged. Programs cooperate with the simulator through the context:
``set_ready()`` stands in for the container's readiness probe (a container without one is Ready while it
runs, as on a kubelet, and ``set_ready`` changes nothing), and stopping -- async programs ``await ctx.sleep(s)`` or
``await ctx.stopped()``, thread programs call ``ctx.wait(s)``; both return True once the pod is stopping
and raise :class:`InjectedCrashError` when a crash fault was injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gpu_operator.agents.shared.cluster import NodeCluster
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.kubelet.allocation import ContainerAllocation


class InjectedCrashError(RuntimeError):
    """Raised inside a program when the simulator injects a crash (the container then restarts)."""


class ProgramExit(Exception):  # noqa: N818 (named like SystemExit: it is an exit, not an error)
    """Raise to end a program with an exit code (0 is success) and a termination message."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"exit code {code}")
        self.code = code
        self.message = message


class Signals:
    """Stop, crash and readiness signalling between the runtime (event loop) and one program run."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop, on_ready: Callable[[bool], None]) -> None:
        self._loop = loop
        self._on_ready = on_ready
        self._stop = threading.Event()
        self._async_stop = asyncio.Event()
        self.crash_message: str | None = None

    def stop(self) -> None:
        """Ask the program to stop (called in the loop thread)."""
        self._stop.set()
        self._async_stop.set()

    def crash(self, message: str) -> None:
        self.crash_message = message
        self.stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def check(self) -> None:
        if self.crash_message is not None:
            raise InjectedCrashError(self.crash_message)

    def ready(self, value: bool) -> None:
        if self._in_loop():
            self._on_ready(value)
        else:
            self._loop.call_soon_threadsafe(self._on_ready, value)

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def wait_blocking(self, timeout: float | None) -> bool:
        stopped = self._stop.wait(timeout)
        self.check()
        return stopped

    async def wait_async(self, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._async_stop.wait(), timeout)
        self.check()
        return self._async_stop.is_set()


class NodeLabels:
    """The program's own Node, labels only (``gpu_operator.agents.runtime.NodeAccess``), through the
    simulator's API client."""

    def __init__(self, *, api: ApiClient, name: str) -> None:
        self._api = api
        self.name = name

    async def labels(self) -> dict[str, str]:
        node = await self._api.get(f"/api/v1/nodes/{self.name}")
        return dict(node.get("metadata", {}).get("labels") or {})

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        # A merge patch: null removes a label, the node's other labels stay.
        await self._api.patch(f"/api/v1/nodes/{self.name}", {"metadata": {"labels": dict(changes)}})

    async def annotations(self) -> dict[str, str]:
        node = await self._api.get(f"/api/v1/nodes/{self.name}")
        return dict(node.get("metadata", {}).get("annotations") or {})

    async def patch_annotations(self, changes: Mapping[str, str | None]) -> None:
        await self._api.patch(f"/api/v1/nodes/{self.name}", {"metadata": {"annotations": dict(changes)}})

    async def apply_node_feature(self, body: Mapping[str, Any]) -> None:
        """Create or update an NFD NodeFeature (GFD's NodeFeature output)."""
        meta = body["metadata"]
        base = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{meta['namespace']}/nodefeatures"
        try:
            await self._api.patch(
                f"{base}/{meta['name']}", {"metadata": {"labels": meta["labels"]}, "spec": body["spec"]}
            )
        except ApiError as error:
            if error.code != 404:
                raise
            await self._api.post(base, dict(body), want=False)


@dataclass(frozen=True, kw_only=True)
class ProgramContext:
    """Everything one program run gets; see the module docstring."""

    node_name: str
    namespace: str
    pod_name: str
    pod_uid: str
    container_name: str
    program: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    host_root: Path
    plugin_dir: Path
    pod_resources_socket: Path
    gpu: GpuBackend
    rootfs: Path
    mounts: Mapping[str, Path] = field(default_factory=dict)
    devices: tuple[ContainerAllocation, ...] = ()
    api_server: str = ""
    node: NodeLabels | None = None
    #: Pods, evictions, events and the Node for agents that act on the node (driver and MIG managers).
    cluster: NodeCluster | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("gpu_operator.sim.program"))
    signals: Signals | None = None

    def path(self, container_path: str) -> Path:
        """Where ``container_path`` (absolute inside the container) lives on this machine: under the longest
        matching volume mount, else in the container's own private root."""
        target = PurePosixPath("/") / container_path
        best: tuple[int, Path] | None = None
        for mount_path, directory in self.mounts.items():
            mount = PurePosixPath(mount_path)
            if (target == mount or mount in target.parents) and (best is None or len(mount.parts) > best[0]):
                best = (len(mount.parts), directory / target.relative_to(mount))
        if best is not None:
            return best[1]
        return self.rootfs / str(target).lstrip("/")

    def host_path(self, node_path: str) -> Path:
        """``node_path`` (absolute on the node) under the node's host root."""
        return self.host_root / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        """Report readiness (what a passing or failing readiness probe would)."""
        if self.signals is not None:
            self.signals.ready(ready)

    @property
    def stopping(self) -> bool:
        return self.signals is not None and self.signals.stopping

    def wait(self, timeout: float | None = None) -> bool:
        """Thread programs: block up to ``timeout`` s; True once asked to stop (raises InjectedCrashError)."""
        if self.signals is None:
            raise RuntimeError("this context is not attached to a running container")
        return self.signals.wait_blocking(timeout)

    async def sleep(self, seconds: float | None) -> bool:
        """Async programs: sleep up to ``seconds``; True once asked to stop (raises InjectedCrashError)."""
        if self.signals is None:
            raise RuntimeError("this context is not attached to a running container")
        return await self.signals.wait_async(seconds)

    async def stopped(self) -> None:
        """Async programs: return when asked to stop (raises InjectedCrashError)."""
        await self.sleep(None)
