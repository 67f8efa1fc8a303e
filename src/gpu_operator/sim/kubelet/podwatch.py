"""The simulated kubelets' only read of pods: one shared informer of every bound pod, and its dispatch.

Rather than a watch per node (a thousand long-lived requests), one informer (``kube.informer``, the
operator's own, here over the simulator's JSON client ``kube.restkube``) with the field selector
``spec.nodeName!=`` follows every bound pod. It keeps whole pods only for this simulator's nodes (the
same dicts the pod workers hold, so nothing is stored twice) and only what a later deletion needs of the
others. Its retry policy is the informers': a watch that ends resumes, a ``410 Gone`` lists again at
once, a broken connection lists again after a backoff, and pods that vanished meanwhile are reported
deleted.

:class:`PodDispatcher` routes each change to the node the pod is bound to: a new pod gets a
:class:`~gpu_operator.sim.kubelet.runtime.PodWorker`; a pod with a ``deletionTimestamp`` is terminated gracefully
and then deleted; a pod that vanished (force-deleted) has its programs stopped without further API calls.
Pods already finished before the simulator saw them are left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from gpu_operator.kube.informer import Informer
from gpu_operator.kube.restclient import ApiClient
from gpu_operator.kube.restkube import RestKube
from gpu_operator.sim.kubelet.host import SimCore
from gpu_operator.sim.kubelet.node import SimNode
from gpu_operator.sim.kubelet.runtime import PodWorker

JSON = dict[str, Any]
log = logging.getLogger(__name__)
BOUND = "spec.nodeName!="
TERMINAL = ("Succeeded", "Failed")


def _slim(pod: JSON) -> JSON:
    meta = pod["metadata"]
    return {
        "metadata": {"uid": meta.get("uid"), "name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {"nodeName": pod.get("spec", {}).get("nodeName")},
    }


def pod_informer(*, api: ApiClient, nodes: Collection[str], on_event: Callable[[str, JSON], None]) -> Informer:
    """The informer of every bound pod; ``on_event(kind, pod)`` (ADDED, MODIFIED, DELETED) for each change
    of a pod, whole for a pod on one of ``nodes`` (a live view: nodes come and go)."""

    def keep(pod: JSON) -> JSON:
        return pod if pod.get("spec", {}).get("nodeName") in nodes else _slim(pod)

    def changed(old: JSON | None, new: JSON | None) -> None:
        kind, pod = ("DELETED", old) if new is None else ("ADDED" if old is None else "MODIFIED", new)
        assert pod is not None
        try:
            on_event(kind, pod)
        except Exception:  # one bad pod must not stop the watch of all others
            log.exception("handling %s of pod %s failed", kind, pod["metadata"].get("name"))

    return Informer(RestKube(api), "v1", "Pod", fields=BOUND, transform=keep, on_change=changed)


class PodDispatcher:
    """``on_event`` for :func:`pod_informer`, over the simulator's nodes."""

    def __init__(self, *, core: SimCore, nodes: dict[str, SimNode]) -> None:
        self.core = core
        self.nodes = nodes
        self._background: set[asyncio.Task[object]] = set()
        self._terminating: set[str] = set()

    def _spawn(self, coroutine: Coroutine[Any, Any, object], name: str) -> None:
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
