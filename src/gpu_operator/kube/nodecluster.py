"""Two implementations of the node agents' cluster access (``agents.shared.cluster.NodeCluster``).

:class:`LightkubeCluster` uses lightkube's async client (the in-cluster service account on a real node;
imported lazily, so importing this module costs nothing). :class:`RestCluster` speaks plain JSON over
any client with ``get``/``post``/``patch``/``delete`` by path (:class:`JsonApi`), e.g. the simulator's
pooled client, so a thousand simulated nodes share one connection pool instead of one client each.
Both select pods with the ``spec.nodeName`` field selector: an agent never lists the whole cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

from gpu_operator.kube.api import Kube
from gpu_operator.kube.objects import event_body, eviction_body, eviction_outcome, node_patch_body
from gpu_operator.kube.podview import Eviction, NodeInfo, PodInfo, pod_info

JSON = dict[str, Any]


_NODE = {"apiVersion": "v1", "kind": "Node"}
EVENT_NAMESPACE = "default"  # Node events live there, where `kubectl describe node` finds them
AGENT = "gpu-operator-agent"


def _node_event(node_name: str, *, reason: str, message: str, warning: bool) -> JSON:
    return event_body(
        involved={**_NODE, "metadata": {"name": node_name}}, reason=reason, message=message, warning=warning,
        component=AGENT, host=node_name, namespace=EVENT_NAMESPACE,
    )  # fmt: skip


def _node_info(obj: Mapping[str, Any]) -> NodeInfo:
    meta = obj.get("metadata") or {}
    return NodeInfo(
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
    )


class LightkubeCluster:
    """NodeCluster over the in-cluster API: ``kube.api.Kube`` on lightkube (made lazily, from the pod's
    service account, unless a client is given)."""

    def __init__(self, *, node_name: str, client: Any = None, field_manager: str = AGENT) -> None:
        self.node_name = node_name
        self._client = client
        self._field_manager = field_manager
        self._kube: Kube | None = None

    def _api(self) -> Kube:
        if self._kube is None:
            if self._client is None:
                from gpu_operator.kube.connect import async_client  # noqa: PLC0415 - only where an API server is

                self._client = async_client(field_manager=self._field_manager)
            self._kube = Kube(self._client, field_manager=self._field_manager)
        return self._kube

    async def node(self) -> NodeInfo:
        node = await self._api().get("v1", "Node", self.node_name)
        if node is None:
            raise LookupError(f"Node {self.node_name} does not exist")  # as RestCluster's 404 does
        return _node_info(node)

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        body = node_patch_body(labels=labels, annotations=annotations, unschedulable=unschedulable)
        if body:
            await self._api().patch("v1", "Node", self.node_name, body)

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        pods = await self._api().list_objects(
            "v1", "Pod", namespace="*", labels=_selector(selector), fields={"spec.nodeName": self.node_name}
        )
        return [pod_info(pod) for pod in pods]

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        return await self._api().evict(namespace=namespace, name=name)

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        await self._api().delete("v1", "Pod", name, namespace=namespace, grace_seconds=grace_seconds)

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        body = _node_event(self.node_name, reason=reason, message=message, warning=warning)
        # Events are a courtesy: the work never fails because one could not be recorded.
        with contextlib.suppress(Exception):
            await self._api().create(body)


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
        return _node_info(await self.api.get(self._node_path))

    async def patch_node(
        self,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
    ) -> None:
        body = node_patch_body(labels=labels, annotations=annotations, unschedulable=unschedulable)
        if body:
            await self.api.patch(self._node_path, body, kind="merge")

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        params = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        if selector:
            params["labelSelector"] = selector
        listing = await self.api.get("/api/v1/pods", params=params)
        return [pod_info(item) for item in listing.get("items") or []]

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        body = eviction_body(namespace=namespace, name=name)
        try:
            await self.api.post(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/eviction", body, want=False)
        except Exception as error:
            outcome = eviction_outcome(_status(error) or 0)
            if outcome is None:
                raise
            return outcome
        return Eviction.EVICTED

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        await self.api.delete(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", grace_seconds=grace_seconds)

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        body = _node_event(self.node_name, reason=reason, message=message, warning=warning)
        # Events are a courtesy: the work never fails because one could not be recorded.
        with contextlib.suppress(Exception):
            await self.api.post(f"/api/v1/namespaces/{EVENT_NAMESPACE}/events", body, want=False)
