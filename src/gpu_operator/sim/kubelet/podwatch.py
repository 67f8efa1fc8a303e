"""One list+watch of every bound pod, the simulated kubelets' only read of pods, and its dispatch to nodes.

Rather than a watch per node (a thousand long-lived requests), one watch with the field selector
``spec.nodeName!=`` delivers every bound pod and the simulator keeps those of its own nodes. A watch that
ends is resumed from the last resourceVersion (bookmarks keep it fresh); ``410 Gone`` or a broken
connection relists, and pods that disappeared meanwhile are reported deleted.

:class:`PodDispatcher` routes each event to the node the pod is bound to: a new pod gets a
:class:`~gpu_operator.sim.kubelet.runtime.PodWorker`; a pod with a ``deletionTimestamp`` is terminated gracefully
and then deleted; a pod that vanished (force-deleted) has its programs stopped without further API calls.
Pods already finished before the simulator saw them are left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gpu_operator.kube.informer import MAX_RETRY_SECONDS, RETRY_SECONDS
from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.runtime.backoff import Backoff, error_kind
from gpu_operator.sim.kubelet.host import SimCore
from gpu_operator.sim.kubelet.node import SimNode
from gpu_operator.sim.kubelet.runtime import PodWorker

JSON = dict[str, Any]
log = logging.getLogger(__name__)
PATH = "/api/v1/pods"
SELECTOR = "spec.nodeName!="
WATCH_TIMEOUT_SECONDS = "300"
TERMINAL = ("Succeeded", "Failed")


class _GoneError(Exception):
    """The watch's resourceVersion is too old: relist."""


class PodWatch:
    """Calls ``on_event(kind, pod)`` (ADDED, MODIFIED, DELETED) for every bound pod, until cancelled."""

    def __init__(self, *, api: ApiClient, on_event: Callable[[str, JSON], None]) -> None:
        self.api = api
        self.on_event = on_event
        self._known: dict[str, JSON] = {}
        self.relists = 0
        #: Set after the first list has been delivered.
        self.synced = asyncio.Event()

    async def run(self) -> None:
        # The informers' retry policy (kube.informer): 1 s doubling to 30 s while lists keep failing, or
        # what the API server's Retry-After asks; a 410 Gone relists at once.
        backoff = Backoff(initial=RETRY_SECONDS, ceiling=MAX_RETRY_SECONDS)
        while True:
            try:
                version = await self._list()
                backoff.reset()
                while True:
                    version = await self._watch(version)
            except _GoneError:
                log.info("pod watch: resourceVersion expired, relisting")
            except Exception as error:  # whatever broke the watch, the shared pod watch must go on
                delay = backoff.next(error)
                log.warning("pod watch failed (%s: %s); relisting in %.1f s", error_kind(error), error, delay)
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        listing = await self.api.get(PATH, params={"fieldSelector": SELECTOR})
        self.relists += 1
        current = {pod["metadata"]["uid"]: pod for pod in listing.get("items") or []}
        for uid, pod in list(self._known.items()):
            if uid not in current:
                self._deliver("DELETED", pod)
        for pod in current.values():
            self._deliver("MODIFIED" if pod["metadata"]["uid"] in self._known else "ADDED", pod)
        self.synced.set()
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, version: str) -> str:
        params = {"fieldSelector": SELECTOR, "resourceVersion": version, "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        async for event in self.api.watch(PATH, params=params):
            kind = event.get("type", "")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _GoneError
                raise ApiError(code=int(obj.get("code", 500)), reason=str(obj.get("reason")), message=str(obj))
            version = str(obj.get("metadata", {}).get("resourceVersion", version))
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._deliver(kind, obj)
        return version

    def _deliver(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            self._known.pop(uid, None)
        else:
            # Only what a later DELETED needs: the pods themselves are held by their workers.
            meta = pod["metadata"]
            self._known[uid] = {
                "metadata": {"uid": uid, "name": meta.get("name"), "namespace": meta.get("namespace")},
                "spec": {"nodeName": pod.get("spec", {}).get("nodeName")},
            }
        try:
            self.on_event(kind, pod)
        except Exception:  # one bad pod must not stop the watch of all others
            log.exception("handling %s of pod %s failed", kind, pod["metadata"].get("name"))


class PodDispatcher:
    """``on_event`` for :class:`~gpu_operator.sim.kubelet.podwatch.PodWatch`, over the simulator's nodes."""

    def __init__(self, *, core: SimCore, nodes: dict[str, SimNode]) -> None:
        self.core = core
        self.nodes = nodes
        self._background: set[asyncio.Task[None]] = set()
        self._terminating: set[str] = set()

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for pending terminations (at shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def on_event(self, kind: str, pod: JSON) -> None:
        node = self.nodes.get(pod.get("spec", {}).get("nodeName", ""))
        if node is None:
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        worker = node.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                node.workers.pop(uid, None)
                self._spawn(worker.terminate(delete=False), f"stop-{meta['name']}")
            return
        deleting = bool(meta.get("deletionTimestamp"))
        if worker is None:
            if deleting:
                path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                self._spawn(self.core.api.delete(path, grace_seconds=0, uid=uid), f"delete-{meta['name']}")
            elif pod.get("status", {}).get("phase") not in TERMINAL:
                worker = PodWorker(host=node, pod=pod, options=self.core.runtime)
                node.workers[uid] = worker
                worker.start()
            return
        worker.update(pod)
        if deleting and uid not in self._terminating:
            self._terminating.add(uid)
            self._spawn(self._finish(node, worker), f"terminate-{meta['name']}")

    async def _finish(self, node: SimNode, worker: PodWorker) -> None:
        try:
            await worker.terminate(delete=True)
        except Exception:  # the pod stays; the next event retries nothing, so say why
            log.exception("terminating pod %s/%s failed", worker.namespace, worker.name)
        finally:
            node.workers.pop(worker.uid, None)
            self._terminating.discard(worker.uid)
