"""Fake Ready nodes for a control plane without kubelets.

A :class:`FakeNode` registers a Node, reports it Ready with the capacity it is given (e.g.
``{"nvidia.com/gpu": "8"}`` on top of CPU, memory and pods), and from a background thread does what a kubelet
does to stay Ready: refresh the ``Ready`` condition's ``lastHeartbeatTime`` and renew the Lease
``kube-node-lease/<name>``, well within the controller-manager's node-monitor grace period. Nothing runs the
pods that get bound to it; callers may patch pod status themselves.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_HEARTBEAT_INTERVAL = 5.0
LEASE_DURATION_SECONDS = 40
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(*, capacity: Mapping[str, str], heartbeat: dt.datetime, transition: dt.datetime) -> dict[str, Any]:
    """The ``status`` a healthy kubelet would report (as a strategic-merge patch body)."""
    conditions = [
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status (fake node)"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake node"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake node"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "fake node"),
    ]
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": _time(heartbeat),
                "lastTransitionTime": _time(transition),
            }
            for kind, status, reason, message in conditions
        ],
        "nodeInfo": {
            "machineID": "fake",
            "systemUUID": "fake",
            "bootID": "fake",
            "kernelVersion": "6.1.0-fake",
            "osImage": "Fake Linux",
            "containerRuntimeVersion": "fake://1.0",
            "kubeletVersion": "v0.0.0-fake",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


class FakeNode:
    """A registered, Ready, heart-beating Node with no kubelet behind it."""

    def __init__(
        self,
        *,
        client_factory: Callable[[], Client],
        name: str,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        delete_on_stop: bool = True,
    ) -> None:
        self.name = name
        self.labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        self.capacity = {**DEFAULT_CAPACITY, **(capacity or {})}
        self.heartbeat_interval = heartbeat_interval
        self.delete_on_stop = delete_on_stop
        self._client_factory = client_factory
        self._client: Client | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._transition = _now()
        #: Heartbeats sent so far, and the last error the heartbeat thread met (it keeps trying).
        self.heartbeats = 0
        self.last_error: BaseException | None = None

    def __enter__(self) -> FakeNode:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> FakeNode:
        """Register the node and its lease, report it Ready, start the heartbeat thread."""
        client = self._client = self._client_factory()
        node = Node(metadata=ObjectMeta(name=self.name, labels=self.labels))
        client.create(node)
        # renewTime is a MicroTime; ``beat()`` sets it as a string with microseconds.
        lease = Lease(
            metadata=ObjectMeta(name=self.name, namespace=NODE_LEASE_NAMESPACE),
            spec=LeaseSpec(holderIdentity=self.name, leaseDurationSeconds=LEASE_DURATION_SECONDS),
        )
        try:
            client.create(lease)
        except ApiError as error:
            if error.status.code != 409:
                raise
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"fake-node-{self.name}", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        """Send one heartbeat: node status and lease renewal."""
        client = self._require_client()
        now = _now()
        status = node_status(capacity=self.capacity, heartbeat=now, transition=self._transition)
        client.patch(Node.Status, self.name, {"status": status})
        client.patch(Lease, self.name, {"spec": {"renewTime": _micro_time(now)}}, namespace=NODE_LEASE_NAMESPACE)
        self.heartbeats += 1

    def _run(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                self.beat()
            except Exception as error:  # the heartbeat must outlive any single failure (API or transport)
                self.last_error = error
                log.warning("fake node %s: heartbeat failed: %s", self.name, error)

    def stop(self) -> None:
        """Stop heart-beating and (by default) delete the node and its lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        client = self._client
        if client is None:
            return
        try:
            if self.delete_on_stop:
                _ignore_missing(lambda: client.delete(Node, self.name))
                _ignore_missing(lambda: client.delete(Lease, self.name, namespace=NODE_LEASE_NAMESPACE))
        finally:
            client.close()
            self._client = None

    def _require_client(self) -> Client:
        if self._client is None:
            raise RuntimeError(f"fake node {self.name} is not started")
        return self._client


def _ignore_missing(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiError as error:
        if error.status.code != 404:
            raise
