"""Two implementations of :class:`~gpu_operator.agents.drivermanager.cluster.NodeCluster`.

:class:`LightkubeCluster` uses lightkube's async client (the in-cluster service account on a real node;
imported lazily, so importing this module costs nothing). :class:`RestCluster` speaks plain JSON over
any client with ``get``/``post``/``patch``/``delete`` by path (:class:`JsonApi`), e.g. the simulator's
pooled client, so a thousand simulated nodes share one connection pool instead of one client each.
Both select pods with the ``spec.nodeName`` field selector: an agent never lists the whole cluster.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

from gpu_operator.agents.drivermanager.cluster import Eviction, NodeInfo, PodInfo, pod_info

JSON = dict[str, Any]


class LightkubeCluster:
    """NodeCluster over the in-cluster API with lightkube (imported lazily: only real nodes need it)."""

    def __init__(self, *, node_name: str, client: Any = None, field_manager: str = "gpu-operator-agent") -> None:
        self.node_name = node_name
        self._client = client
        self._field_manager = field_manager

    def _api(self) -> Any:
        if self._client is None:
            from lightkube import AsyncClient  # noqa: PLC0415 - only where an API server is reachable

            self._client = AsyncClient(field_manager=self._field_manager)
        return self._client

    async def node(self) -> NodeInfo:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415

        obj = await self._api().get(Node, self.node_name)
        meta = obj.metadata
        unschedulable = bool(obj.spec.unschedulable) if obj.spec is not None else False
        return NodeInfo(
            labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}), unschedulable=unschedulable
        )

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415
        from lightkube.types import PatchType  # noqa: PLC0415

        body: dict[str, Any] = {}
        if labels:
            body.setdefault("metadata", {})["labels"] = dict(labels)
        if annotations:
            body.setdefault("metadata", {})["annotations"] = dict(annotations)
        if unschedulable is not None:
            body["spec"] = {"unschedulable": unschedulable}
        if body:
            await self._api().patch(Node, self.node_name, body, patch_type=PatchType.MERGE)

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        from lightkube.resources.core_v1 import Pod  # noqa: PLC0415

        fields = {"spec.nodeName": self.node_name}
        pods = self._api().list(Pod, namespace="*", fields=fields, labels=_selector(selector))
        return [pod_info(pod.to_dict()) async for pod in pods]

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        from lightkube import ApiError  # noqa: PLC0415
        from lightkube.models.meta_v1 import ObjectMeta  # noqa: PLC0415
        from lightkube.resources.core_v1 import Pod  # noqa: PLC0415

        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        try:
            await self._api().create(eviction, name=name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 429:
                return Eviction.BLOCKED
            if error.status.code == 404:
                return Eviction.GONE
            raise
        return Eviction.EVICTED

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        from lightkube import ApiError  # noqa: PLC0415
        from lightkube.resources.core_v1 import Pod  # noqa: PLC0415

        try:
            await self._api().delete(Pod, name, namespace=namespace, grace_period=grace_seconds)
        except ApiError as error:
            if error.status.code != 404:
                raise

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        from lightkube import ApiError  # noqa: PLC0415
        from lightkube.models.core_v1 import EventSource, ObjectReference  # noqa: PLC0415
        from lightkube.models.meta_v1 import ObjectMeta  # noqa: PLC0415
        from lightkube.resources.core_v1 import Event  # noqa: PLC0415

        now = dt.datetime.now(dt.UTC)
        event = Event(
            metadata=ObjectMeta(generateName=f"{self.node_name}.", namespace="default"),
            involvedObject=ObjectReference(kind="Node", name=self.node_name, apiVersion="v1"),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=EventSource(component="gpu-operator-agent", host=self.node_name),
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )
        # Events are a courtesy: the work never fails because one could not be recorded.
        with contextlib.suppress(ApiError):
            await self._api().create(event, namespace="default")


def _selector(selector: str | None) -> dict[str, Any] | None:
    """lightkube's label filter from ``a=b,c`` (equality and existence terms only)."""
    if not selector:
        return None
    from lightkube.operators import exists  # noqa: PLC0415

    labels: dict[str, Any] = {}
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        key, sep, value = term.partition("=")
        labels[key.strip()] = value.strip() if sep else exists()
    return labels


class JsonApi(Protocol):
    """A JSON REST client (the simulator's ``ApiClient`` fits); errors carry the HTTP status as ``code``."""

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> JSON: ...

    async def post(self, path: str, body: JSON, *, want: bool = True) -> JSON: ...

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> JSON: ...

    async def delete(self, path: str, *, grace_seconds: int | None = None, uid: str | None = None) -> None: ...


def _status(error: Exception) -> int | None:
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


class RestCluster:
    """NodeCluster over a :class:`JsonApi`."""

    def __init__(self, *, api: JsonApi, node_name: str) -> None:
        self.api = api
        self.node_name = node_name

    @property
    def _node_path(self) -> str:
        return f"/api/v1/nodes/{quote(self.node_name)}"

    async def node(self) -> NodeInfo:
        obj = await self.api.get(self._node_path)
        meta = obj.get("metadata") or {}
        return NodeInfo(
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
        )

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        body: JSON = {}
        if labels:
            body.setdefault("metadata", {})["labels"] = dict(labels)
        if annotations:
            body.setdefault("metadata", {})["annotations"] = dict(annotations)
        if unschedulable is not None:
            body["spec"] = {"unschedulable": unschedulable}
        if body:
            await self.api.patch(self._node_path, body, kind="merge")

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        params = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        if selector:
            params["labelSelector"] = selector
        listing = await self.api.get("/api/v1/pods", params=params)
        return [pod_info(item) for item in listing.get("items") or []]

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            await self.api.post(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/eviction", body, want=False)
        except Exception as error:
            if _status(error) == 429:
                return Eviction.BLOCKED
            if _status(error) == 404:
                return Eviction.GONE
            raise
        return Eviction.EVICTED

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        await self.api.delete(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", grace_seconds=grace_seconds)

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.node_name}.", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": self.node_name, "apiVersion": "v1"},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "gpu-operator-agent", "host": self.node_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # Events are a courtesy: the work never fails because one could not be recorded.
        with contextlib.suppress(Exception):
            await self.api.post("/api/v1/namespaces/default/events", body, want=False)
