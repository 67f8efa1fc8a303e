"""The node agents' cluster access (``agents.shared.cluster.NodeCluster``), over any KubeClient.

:class:`ClientCluster` is the one implementation: it reads and writes through a
:class:`~gpu_operator.kube.client.KubeClient`. :class:`LightkubeCluster` gives it ``kube.api.Kube`` on
lightkube (the in-cluster service account on a real node; made lazily, so building one costs nothing);
:class:`RestCluster` gives it ``kube.restkube.RestKube`` over the simulator's pooled JSON client, so a
thousand simulated nodes share one connection pool instead of one client each. Pods are selected with
the ``spec.nodeName`` field selector (an agent never lists the whole cluster) and a label selector in
its text form, with any requirement (``app=x``, ``tier!=batch``, ``team in (a,b)``, ``!skip``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.client import KubeClient
from gpu_operator.kube.objects import event_body, node_patch_body
from gpu_operator.kube.podview import Eviction, NodeInfo, PodInfo, pod_info
from gpu_operator.kube.restclient import ApiClient
from gpu_operator.kube.restkube import RestKube
from gpu_operator.names.selectors import parse_selector

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


class ClientCluster:
    """NodeCluster over the KubeClient that ``connect`` makes (once, at the first call)."""

    def __init__(self, *, node_name: str, connect: Callable[[], KubeClient]) -> None:
        self.node_name = node_name
        self._connect = connect
        self._kube: KubeClient | None = None

    def _api(self) -> KubeClient:
        if self._kube is None:
            self._kube = self._connect()
        return self._kube

    async def node(self) -> NodeInfo:
        node = await self._api().get("v1", "Node", self.node_name)
        if node is None:
            raise LookupError(f"Node {self.node_name} does not exist")
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
        """This node's pods, those matching ``selector`` (a label selector's text; a bad one raises
        ``SelectorError`` naming it) when given."""
        labels = parse_selector(selector, field="label selector") if selector else None
        listing = self._api().list_stream("v1", "Pod", labels=labels, fields=f"spec.nodeName={self.node_name}")
        return [pod_info(pod) async for pod in listing]

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        return await self._api().evict(namespace=namespace, name=name)

    async def delete_pod(self, *, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        await self._api().delete("v1", "Pod", name, namespace=namespace, grace_seconds=grace_seconds)

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        body = _node_event(self.node_name, reason=reason, message=message, warning=warning)
        # Events are a courtesy: the work never fails because one could not be recorded.
        with contextlib.suppress(Exception):
            await self._api().create(body)


class LightkubeCluster(ClientCluster):
    """NodeCluster over lightkube: ``client``, or the pod's service account when none is given."""

    def __init__(self, *, node_name: str, client: Any = None, field_manager: str = AGENT) -> None:
        def connect() -> KubeClient:
            chosen = client
            if chosen is None:
                from gpu_operator.kube.connect import async_client  # noqa: PLC0415 - only where an API server is

                chosen = async_client(field_manager=field_manager)
            return Kube(chosen, field_manager=field_manager)

        super().__init__(node_name=node_name, connect=connect)


class RestCluster(ClientCluster):
    """NodeCluster over the simulator's pooled JSON client."""

    def __init__(self, *, api: ApiClient, node_name: str) -> None:
        self.api = api
        super().__init__(node_name=node_name, connect=lambda: RestKube(api, field_manager=AGENT))
