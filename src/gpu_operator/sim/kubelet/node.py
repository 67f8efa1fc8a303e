"""One simulated node: its Node and Lease objects, host directory, GPUs, device manager and pods.

A :class:`SimNode` is the per-node half of the simulated kubelet (the shared half -- API client, heartbeat
loop, pod watch, program registry -- is :class:`~gpu_operator.sim.core.SimCore`). Its host root
(``<root>/<node>``) holds the kubelet directories (``var/lib/kubelet/device-plugins``,
``var/lib/kubelet/pod-resources``, ``var/lib/kubelet/pods/<uid>``), ``etc/os-release``, on NIC nodes an
empty ``run/mellanox/drivers`` (the OFED container's exported root), and whatever agents write through
hostPath mounts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import NodeProfile
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.names.network import DRIVERS_DIR
from gpu_operator.nic.simulated import write_nic_tree
from gpu_operator.sim.kubelet.devices import DeviceManager
from gpu_operator.sim.kubelet.gpuplugin import SimGpuPlugin
from gpu_operator.sim.kubelet.heartbeat import Beat, now_utc
from gpu_operator.sim.kubelet.host import SimCore
from gpu_operator.sim.kubelet.runtime import PodWorker
from gpu_operator.sim.objects import (
    LEASE_NAMESPACE,
    NodeShape,
    base_capacity,
    lease_manifest,
    node_ip,
    node_manifest,
    pod_ip,
    status_patch,
)
from gpu_operator.sim.programs.programs import ProgramRegistry
from gpu_operator.sim.shapes import os_release, shape_from_profile

JSON = dict[str, Any]
log = logging.getLogger(__name__)
GPU_PLUGIN_MODES = ("none", "grpc", "local")


@dataclass(frozen=True, kw_only=True)
class NodeOptions:
    """How much of the kubelet a node simulates.

    ``kubelet_grpc``: serve Registration and PodResources on real unix sockets (off for nodes simulated
    at scale). ``gpu_plugin``: the simulator's own ``nvidia.com/gpu`` plugin -- ``none`` (the real device
    plugin agent provides it), ``grpc`` (over the sockets; needs ``kubelet_grpc``) or ``local`` (in-process).
    """

    kubelet_grpc: bool = True
    gpu_plugin: str = "none"

    def __post_init__(self) -> None:
        if self.gpu_plugin not in GPU_PLUGIN_MODES:
            raise ValueError(f"gpu_plugin must be one of {GPU_PLUGIN_MODES}, got {self.gpu_plugin!r}")
        if self.gpu_plugin == "grpc" and not self.kubelet_grpc:
            raise ValueError("gpu_plugin='grpc' needs kubelet_grpc=True")


class SimNode:
    """A simulated node (implements :class:`~gpu_operator.sim.kubelet.host.PodHost` for its pods)."""

    def __init__(
        self,
        *,
        core: SimCore,
        name: str,
        index: int,
        profile: NodeProfile,
        options: NodeOptions,
        shape: NodeShape | None = None,
    ) -> None:
        self.core = core
        self._name = name
        self.index = index
        self.profile = profile
        self.options = options
        # A request's shape (NICs, an OS pool) wins over the profile's own.
        self.shape = shape or shape_from_profile(profile)
        self._gpu: GpuBackend = (
            SimulatedBackend(profile=profile, seed=core.seed, node_name=name)
            if profile.gpu_count
            else NullBackend(reason=f"simulated node {name} ({profile.name}) has no GPU")
        )
        self._dirs = KubeletDirs(root=core.root / name)
        self._devices = DeviceManager(
            node_name=name, dirs=self._dirs, on_capacity=self._capacity_changed, serve=options.kubelet_grpc
        )
        self.plugin = SimGpuPlugin(backend=self._gpu) if profile.gpu_count and options.gpu_plugin != "none" else None
        self.ready = True
        self.transition = now_utc()
        self.extended: dict[str, tuple[int, int]] = {}
        self.beat = Beat(name=name, status_body=self._status_body, on_status=self._status_posted)
        self.workers: dict[str, PodWorker] = {}
        self.uid = ""
        self.registered = False
        self._slots: dict[str, int] = {}
        self._next_slot = 0

    # -- PodHost --------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def host_ip(self) -> str:
        return node_ip(self.index)

    @property
    def host_root(self) -> Path:
        return self._dirs.root

    @property
    def dirs(self) -> KubeletDirs:
        return self._dirs

    @property
    def gpu(self) -> GpuBackend:
        return self._gpu

    @property
    def devices(self) -> DeviceManager:
        return self._devices

    @property
    def api(self) -> ApiClient:
        return self.core.api

    @property
    def registry(self) -> ProgramRegistry:
        return self.core.registry

    @property
    def api_server(self) -> str:
        return self.core.api.access.server

    def pod_ip(self, uid: str, *, host_network: bool) -> str:
        if host_network:
            return self.host_ip
        if uid not in self._slots:
            # Round-robin over the node's 254 addresses: a just-freed address is not handed out again at
            # once, since the old pod's servers may still be closing their sockets on it.
            used = set(self._slots.values())
            slot = next((s % 254 for s in range(self._next_slot, self._next_slot + 254) if s % 254 not in used), None)
            if slot is None:
                raise RuntimeError(f"node {self.name}: all 254 pod addresses are in use")
            self._slots[uid], self._next_slot = slot, slot + 1
        return pod_ip(node_index=self.index, slot=self._slots[uid])

    def release_pod_ip(self, uid: str) -> None:
        self._slots.pop(uid, None)

    def service_env(self) -> dict[str, str]:
        url = urlsplit(self.api_server)
        host, port = url.hostname or "127.0.0.1", str(url.port or 443)
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
        }

    # -- lifecycle ------------------------------------------------------------------------------------

    def _capacities(self) -> tuple[dict[str, str], dict[str, str]]:
        capacity = base_capacity(self.shape)
        allocatable = dict(capacity)
        for resource, (total, healthy) in self.extended.items():
            capacity[resource], allocatable[resource] = str(total), str(healthy)
        return capacity, allocatable

    def _status_body(self, moment: dt.datetime) -> JSON:
        capacity, allocatable = self._capacities()
        return status_patch(
            ready=self.ready, heartbeat=moment, transition=self.transition, capacity=capacity, allocatable=allocatable
        )

    def _status_posted(self) -> None:
        # The Node is Ready in the API again: pods the node-lifecycle controller marked not Ready while
        # heartbeats lagged get their status back now rather than after their write-back's back-off.
        if self.ready:
            for worker in self.workers.values():
                worker.repair_status()

    async def register(self) -> None:
        """Create the host directory, start the kubelet servers, register the Node and its Lease."""
        self.host_root.mkdir(parents=True, exist_ok=True)
        (self.host_root / "etc").mkdir(exist_ok=True)
        (self.host_root / "etc" / "os-release").write_text(os_release(self.shape), encoding="utf-8")
        if self.shape.nic_count:
            (self.host_root / DRIVERS_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
            # The NICs' sysfs and /dev/infiniband, read by the network agents (a few ms: off the loop).
            await asyncio.to_thread(write_nic_tree, root=self.host_root, model=self.shape.nic_model,
                                    count=self.shape.nic_count, node_index=self.index)  # fmt: skip
        await self._devices.start()
        if self.plugin is not None and self.options.gpu_plugin == "local":
            await self._devices.attach_local(self.plugin, publish=False)
            self.extended = self._devices.capacity()
        now = now_utc()
        capacity, allocatable = self._capacities()
        manifest = node_manifest(
            name=self.name,
            shape=self.shape,
            index=self.index,
            kubelet_version=self.core.kubelet_version,
            capacity=capacity,
            allocatable=allocatable,
            now=now,
        )
        created = await self.api.post("/api/v1/nodes", manifest)
        self.uid = created["metadata"]["uid"]
        try:
            await self.api.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                lease_manifest(name=self.name, node_uid=self.uid, now=now),
                want=False,
            )
        except ApiError as error:
            if error.code != 409:  # a Lease left over from an earlier node of this name is renewed instead
                raise
        self.registered = True
        self.core.heartbeat.add(self.beat)
        if self.plugin is not None and self.options.gpu_plugin == "grpc":
            await self.plugin.serve(plugin_dir=self._dirs.plugin_dir)

    async def _capacity_changed(self, capacities: dict[str, tuple[int, int] | None]) -> None:
        removed = [r for r in self.extended if r not in capacities]
        self.extended = {r: c for r, c in capacities.items() if c is not None}
        if not self.registered:
            return
        capacity, allocatable = self._capacities()
        patch_cap: dict[str, str | None] = {**capacity, **dict.fromkeys(removed)}
        patch_alloc: dict[str, str | None] = {**allocatable, **dict.fromkeys(removed)}
        body = status_patch(
            ready=self.ready,
            heartbeat=now_utc(),
            transition=self.transition,
            capacity=patch_cap,
            allocatable=patch_alloc,
        )
        try:
            await self.api.patch(f"/api/v1/nodes/{self.name}/status", body, kind="strategic")
        except ApiError as error:
            log.warning("node %s: capacity update failed: %s", self.name, error)

    async def set_ready(self, ready: bool, *, heartbeats: bool = True) -> None:
        """Report Ready=``ready``; ``heartbeats=False`` stops Lease and status updates altogether."""
        if ready != self.ready:
            self.ready = ready
            self.transition = now_utc()
        self.beat.beating = heartbeats
        if heartbeats:
            self.core.heartbeat.status_now(self.name)  # its success repairs the pods' statuses (_status_posted)

    async def gpu_changed(self) -> None:
        """A GPU fault was injected: let the simulator's own plugin re-read health."""
        if self.plugin is not None and self.plugin.drain_events() and self.options.gpu_plugin == "local":
            await self._devices.refresh_local()

    async def restart_kubelet(self) -> None:
        await self._devices.restart_kubelet()
        if self.plugin is not None and self.options.gpu_plugin == "grpc":
            await self.plugin.restart()

    async def remove(self, *, delete_objects: bool = True) -> None:
        """Stop every pod, the servers and the heartbeat; delete the Node, its Lease and its pods."""
        self.core.heartbeat.remove(self.name)
        workers = list(self.workers.values())
        self.workers.clear()
        await asyncio.gather(*(w.terminate(delete=delete_objects) for w in workers), return_exceptions=True)
        if self.plugin is not None:
            await self.plugin.stop()
        await self._devices.stop()
        self._gpu.close()
        if delete_objects and self.registered:
            await self.api.delete(f"/api/v1/nodes/{self.name}", uid=self.uid or None)
            await self.api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self.name}")
        self.registered = False
        shutil.rmtree(self.host_root, ignore_errors=True)
