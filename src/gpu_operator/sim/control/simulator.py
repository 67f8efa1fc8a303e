"""``Simulator``: simulated GPU nodes on a real cluster, driven from synchronous code.

Usage::

    with Simulator(access=ClusterAccess.from_kubeconfig(path)) as sim:
        sim.registry.register_program("my-agent", my_agent)      # what `gpu-operator agent my-agent` runs
        names = sim.add_nodes("dgx-h100:2,cpu-only:1")            # Ready, heart-beating nodes
        sim.inject_xid(names[0], gpu=3, xid=79)
        nics = sim.add_nodes(nic_node_requests(4))                  # Mellanox NIC nodes in two OS pools

Everything runs in one asyncio event loop on a background thread (API client, heartbeat loop, pod watch,
gRPC servers, async programs); the public methods submit coroutines to it and wait. ``stop()`` (or leaving
the ``with`` block) stops every program and deletes the nodes, their Leases and their pods.

Several simulators may share one cluster (one process keeps a few thousand kubelets' heartbeats at
most): give each its own ``name_prefix`` and a disjoint ``index_offset`` (node ``i`` gets index
``index_offset + i``, from which its node and pod addresses come), e.g. ``sim0``/0, ``sim1``/2000, ...
``lease_interval`` and ``status_interval`` set the heartbeat: a large fleet renews less often (with the
node-lifecycle controller's ``--node-monitor-grace-period`` raised to match).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.kube.restclient import ApiClient, ClusterAccess
from gpu_operator.sim.control import faults
from gpu_operator.sim.control import server as control
from gpu_operator.sim.kubelet.heartbeat import LEASE_INTERVAL, STATUS_INTERVAL, Heartbeat
from gpu_operator.sim.kubelet.host import RuntimeOptions, SimCore
from gpu_operator.sim.kubelet.node import NodeOptions, SimNode
from gpu_operator.sim.kubelet.podwatch import PodDispatcher, pod_informer
from gpu_operator.sim.nics import NicRequest, OsPool
from gpu_operator.sim.objects import MAX_NODE_INDEX
from gpu_operator.sim.programs.programs import ProgramRegistry, default_registry
from gpu_operator.sim.shapes import NodeRequest, parse_node_spec, shape_for

T = TypeVar("T")
log = logging.getLogger(__name__)
DEFAULT_TIMEOUT = 120.0
EXECUTOR_THREADS = 64  # threads for the agents' blocking calls (they mostly sleep: simulated hardware time)


class Simulator:
    """Simulated nodes acting as kubelets for a real API server (see the module docstring)."""

    def __init__(
        self,
        *,
        access: ClusterAccess,
        root: Path | None = None,
        registry: ProgramRegistry | None = None,
        runtime: RuntimeOptions | None = None,
        lease_interval: float = LEASE_INTERVAL,
        status_interval: float = STATUS_INTERVAL,
        concurrency: int = 8,
        seed: int = 0,
        name_prefix: str = "sim",
        index_offset: int = 0,
    ) -> None:
        self.access = access
        self.registry = registry if registry is not None else default_registry()
        self.runtime = runtime or RuntimeOptions()
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.concurrency = concurrency
        self.seed = seed
        self.name_prefix = name_prefix
        if not 0 <= index_offset <= MAX_NODE_INDEX:
            raise ValueError(f"index_offset must be within 0..{MAX_NODE_INDEX}, got {index_offset}")
        self.index_offset = index_offset
        self._owns_root = root is None
        self.root = root or Path(tempfile.mkdtemp(prefix="gpu-sim-", dir="/tmp"))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._core: SimCore | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.nodes: dict[str, SimNode] = {}
        self._dispatch: PodDispatcher | None = None
        self._stopping: asyncio.Event | None = None
        self._counter = itertools.count(index_offset)
        self._names: dict[str, itertools.count[int]] = {}
        self._control: asyncio.AbstractServer | None = None
        self._beats_api: ApiClient | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self, *, timeout: float = 30.0) -> Simulator:
        if self._loop is not None:
            raise RuntimeError("the simulator is already started")
        self.root.mkdir(parents=True, exist_ok=True)
        loop = self._loop = asyncio.new_event_loop()
        # Each simulated node stands for a machine of its own: its agents' blocking work (a driver install
        # sleeps for the simulated module-load time in a thread) must not queue behind other nodes' in the
        # default pool of cpu+4 threads. A rolling upgrade of 10 nodes at once waited up to 90 s there.
        loop.set_default_executor(ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="gpu-sim"))
        self._thread = threading.Thread(target=loop.run_forever, name="gpu-sim-loop", daemon=True)
        self._thread.start()
        try:
            self.call(self._start(), timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self) -> None:
        # Few connections on purpose: httpcore scans its whole pool for every request, so at a thousand nodes
        # 8 connections cost half the CPU of 32 and register nodes faster (see BENCHMARKS.md).
        api = ApiClient(access=self.access, max_connections=self.concurrency + 4)
        version = await api.get("/version")
        # The heartbeat has connections of its own, as every real kubelet does: in one shared pool its Lease
        # renewals queued behind thousands of pod requests (token requests, volume reads, status updates)
        # while 1,000 nodes started their pods, and the node-lifecycle controller declared them unreachable.
        self._beats_api = ApiClient(access=self.access, max_connections=self.concurrency)
        heartbeat = Heartbeat(
            api=self._beats_api,
            lease_interval=self.lease_interval,
            status_interval=self.status_interval,
            concurrency=self.concurrency,
        )
        self._core = SimCore(
            api=api,
            heartbeat=heartbeat,
            registry=self.registry,
            root=self.root,
            runtime=self.runtime,
            kubelet_version=str(version.get("gitVersion", "v0.0.0")),
            seed=self.seed,
        )
        self._dispatch = PodDispatcher(core=self._core, nodes=self.nodes)
        pods = pod_informer(api=api, nodes=self.nodes.keys(), on_event=self._dispatch.on_event)
        self._stopping = asyncio.Event()
        self._tasks = [
            asyncio.create_task(heartbeat.run(), name="sim-heartbeat"),
            asyncio.create_task(pods.run(stop=self._stopping), name="sim-pod-watch"),
        ]
        await asyncio.wait_for(pods.synced.wait(), 30.0)

    def stop(self, *, timeout: float = 120.0) -> None:
        """Remove every node (stopping its programs) and shut the loop down. Safe to call twice."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if self._core is not None:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=30)
            loop.close()
            self._core = None
            if self._owns_root:
                shutil.rmtree(self.root, ignore_errors=True)

    def serve_control(self, path: Path) -> None:
        """Answer ``gpu-operator sim fault``/``status`` requests on the unix socket ``path``."""
        self._control = self.call(control.serve(path=path, nodes=self.nodes))

    async def _shutdown(self) -> None:
        if self._control is not None:
            self._control.close()
            await self._control.wait_closed()
        await self._remove(list(self.nodes))
        if self._dispatch is not None:
            await self._dispatch.drain()
        if self._stopping is not None:
            self._stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self._core is not None
        await self._core.api.close()
        if self._beats_api is not None:
            await self._beats_api.close()

    def call(self, coroutine: Coroutine[Any, Any, T], *, timeout: float | None = DEFAULT_TIMEOUT) -> T:
        """Run ``coroutine`` in the simulator's loop and return its result."""
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the simulator is not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    @property
    def core(self) -> SimCore:
        if self._core is None:
            raise RuntimeError("the simulator is not started")
        return self._core

    # -- nodes ----------------------------------------------------------------------------------------

    def _new_name(self, profile: str) -> str:
        counter = self._names.setdefault(profile, itertools.count())
        while True:
            name = f"{self.name_prefix}-{profile}-{next(counter)}"
            if name not in self.nodes:
                return name

    def add_nodes(
        self, spec: str | Sequence[NodeRequest], *, options: NodeOptions | None = None, timeout: float = 600.0
    ) -> list[str]:
        """Register the nodes of ``spec`` (``"dgx-h100:2,cpu-only:1"``, or requests such as
        ``shapes.nic_node_requests(100)``); returns their names in order."""
        requests = parse_node_spec(spec) if isinstance(spec, str) else list(spec)
        names = [self._new_name(r.name_part) for r in requests for _ in range(r.count)]
        per_node = [r for r in requests for _ in range(r.count)]
        self.call(self._add(names, per_node, options or NodeOptions()), timeout=timeout)
        return names

    def add_node(
        self,
        profile: str,
        *,
        name: str | None = None,
        options: NodeOptions | None = None,
        nics: NicRequest | None = None,
        os_pool: OsPool | None = None,
    ) -> str:
        request = NodeRequest(profile=profile, count=1, nics=nics, os_pool=os_pool)
        chosen = name or self._new_name(request.name_part)
        self.call(self._add([chosen], [request], options or NodeOptions()))
        return chosen

    async def _add(self, names: list[str], requests: list[NodeRequest], options: NodeOptions) -> None:
        limit = asyncio.Semaphore(self.concurrency)

        async def one(name: str, request: NodeRequest) -> None:
            index = next(self._counter)
            if index > MAX_NODE_INDEX:
                raise RuntimeError(f"node index {index} is past {MAX_NODE_INDEX}: addresses would repeat")
            node = SimNode(
                core=self.core,
                name=name,
                index=index,
                profile=node_profile(request.profile),
                options=options,
                shape=shape_for(request),
            )
            self.nodes[name] = node
            async with limit:
                await node.register()

        results = await asyncio.gather(
            *(one(n, r) for n, r in zip(names, requests, strict=True)), return_exceptions=True
        )
        failures = [(n, r) for n, r in zip(names, results, strict=True) if isinstance(r, BaseException)]
        if failures:
            await self._remove([n for n, _ in failures])
            raise RuntimeError(
                f"{len(failures)} of {len(names)} nodes failed to register; first: {failures[0][0]}: {failures[0][1]}"
            ) from failures[0][1]

    def remove_nodes(self, names: Sequence[str], *, timeout: float = 300.0) -> None:
        self.call(self._remove(list(names)), timeout=timeout)

    async def _remove(self, names: list[str]) -> None:
        limit = asyncio.Semaphore(self.concurrency)

        async def one(node: SimNode) -> None:
            async with limit:
                await node.remove()

        nodes = [self.nodes.pop(n) for n in names if n in self.nodes]
        results = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
        for node, result in zip(nodes, results, strict=True):
            if isinstance(result, Exception):
                log.warning("removing node %s failed: %s", node.name, result)

    def node(self, name: str) -> SimNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"no simulated node {name!r}; nodes: {', '.join(sorted(self.nodes)) or 'none'}") from None

    # -- faults ---------------------------------------------------------------------------------------

    def inject_xid(self, node: str, *, gpu: int, xid: int, gi_id: int | None = None) -> str:
        return self.call(faults.inject_xid(self.node(node), gpu=gpu, xid=xid, gi_id=gi_id))

    def lose_gpu(self, node: str, *, gpu: int) -> str:
        return self.call(faults.lose_gpu(self.node(node), gpu=gpu))

    def recover_gpu(self, node: str, *, gpu: int) -> str:
        return self.call(faults.recover_gpu(self.node(node), gpu=gpu))

    def restart_kubelet(self, node: str) -> str:
        return self.call(faults.restart_kubelet(self.node(node)))

    def fail_driver_install(self, node: str, *, version: str = "", fail: bool = True) -> str:
        return self.call(faults.fail_driver_install(self.node(node), version=version, fail=fail))

    def ofed_fault(self, node: str, *, mode: str, image_contains: str = "") -> str:
        """Make the node's simulated OFED driver load ``fail`` or ``hang`` (for images containing
        ``image_contains`` only, or any), or ``clear`` the fault (``sim.programs.netstandins``)."""
        return self.call(faults.ofed_fault(self.node(node), mode=mode, image_contains=image_contains))

    def set_ready(self, node: str, *, ready: bool, heartbeats: bool = True) -> str:
        return self.call(faults.set_ready(self.node(node), ready=ready, heartbeats=heartbeats))

    def crash(self, node: str, **filters: str | None) -> str:
        """Crash a running container (filters: namespace, pod, container, program)."""
        return self.call(faults.crash(self.node(node), **filters))
