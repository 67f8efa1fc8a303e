"""The operator's only API client: server-side apply with one field manager, reads, prunes, status.

A thin layer over lightkube's ``AsyncClient`` that speaks plain dicts (what the renderer produces),
so the reconciler never touches typed models. Writes use server-side apply (field manager
``gpu-operator``, force: the operator owns what it renders); deletes ignore NotFound; reads strip
``managedFields`` so the operator's memory stays small with thousands of nodes.

:func:`with_applied_hash` keeps an idle operator quiet: it stamps what is applied with a hash of the
rendered object, so a pass can skip applying what the live object already carries. Lists of the
kinds the operator caches are answered by its informers (``kube.informer``) instead of the API.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from lightkube import ApiError, AsyncClient, codecs, operators
from lightkube.codecs import resource_registry
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from gpu_operator.kube.client import CHUNK, WatchEvent, WatchExpiredError
from gpu_operator.kube.informer import Informer
from gpu_operator.kube.objects import Eviction, event_body, eviction_body, eviction_outcome
from gpu_operator.kube.slim import data_keys
from gpu_operator.names import keys
from gpu_operator.names.selectors import Selector

JSON = dict[str, Any]
FIELD_MANAGER = "gpu-operator"
#: Upstream's annotation name for the same purpose: the hash of the object as last applied.
APPLIED_HASH = keys.APPLIED_HASH

ClusterPolicyResource = create_global_resource("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies")
NVIDIADriverResource = create_global_resource("nvidia.com", "v1alpha1", "NVIDIADriver", "nvidiadrivers")
# The Network Operator's kinds (names.network): the same client serves both operators.
NicClusterPolicyResource = create_global_resource("mellanox.com", "v1alpha1", "NicClusterPolicy", "nicclusterpolicies")
NicNodePolicyResource = create_global_resource("mellanox.com", "v1alpha1", "NicNodePolicy", "nicnodepolicies")
MacvlanNetworkResource = create_global_resource("mellanox.com", "v1alpha1", "MacvlanNetwork", "macvlannetworks")
HostDeviceNetworkResource = create_global_resource(
    "mellanox.com", "v1alpha1", "HostDeviceNetwork", "hostdevicenetworks"
)
IPoIBNetworkResource = create_global_resource("mellanox.com", "v1alpha1", "IPoIBNetwork", "ipoibnetworks")
IPPoolResource = create_namespaced_resource("nv-ipam.nvidia.com", "v1alpha1", "IPPool", "ippools")  # nv-ipam's
NADResource = create_namespaced_resource(
    "k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition", "network-attachment-definitions"
)
ServiceMonitorResource = create_namespaced_resource("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors")


def resource(api_version: str, kind: str) -> Any:
    """The lightkube resource class of ``apiVersion``/``kind``."""
    return resource_registry.load(api_version, kind)


def strip(obj: Any) -> JSON:
    """A plain dict without managedFields (they dominate object size and we never read them)."""
    data: JSON = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    data.get("metadata", {}).pop("managedFields", None)
    return data


def lightkube_fields(text: str | None) -> dict[str, Any] | None:
    """A field selector's text form (``a=b,c!=d``) as lightkube takes it."""
    out: dict[str, Any] = {}
    for term in filter(None, (text or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            out[key.strip()] = operators.not_equal(value.strip())
        else:
            key, value = term.replace("==", "=").split("=", 1)
            out[key.strip()] = value.strip()
    return out or None


def lightkube_labels(labels: Mapping[str, str | None] | Selector | None) -> Any:
    """A label selector as lightkube takes it: a mapping as it is, a parsed one as (key, operator) pairs."""
    if not isinstance(labels, Selector):
        return dict(labels) if labels else None
    made: dict[str, Callable[[tuple[str, ...]], Any]] = {
        "In": lambda values: values[0] if len(values) == 1 else operators.in_(list(values)),
        "NotIn": lambda values: operators.not_in(list(values)),
        "Exists": lambda _: operators.exists(),
        "DoesNotExist": lambda _: operators.not_exists(),
    }
    return [(r.key, made[r.operator](r.values)) for r in labels.requirements] or None


class _Listing:
    """lightkube's paged list as a :class:`~gpu_operator.kube.client.Listing` of plain dicts."""

    def __init__(self, items: Any) -> None:
        self._items = items
        self.resource_version = ""

    async def __aiter__(self) -> AsyncIterator[JSON]:
        async for obj in self._items:
            yield strip(obj)
        self.resource_version = str(self._items.resourceVersion)


def with_applied_hash(obj: Mapping[str, Any], *, key: str = APPLIED_HASH) -> JSON:
    """A copy of ``obj`` annotated (``key``) with a hash of itself (stable: keys sorted, no whitespace)."""
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), key: digest}
    return {**obj, "metadata": meta}


def applied_hash(obj: Mapping[str, Any], *, key: str = APPLIED_HASH) -> str | None:
    """The hash a live object was last applied with (None if it has none)."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


class Kube:
    """Dict-in, dict-out access to the API server for the operator.

    Lists are served from a synced informer (``kube.informer``) that covers the query, when the
    operator gave it one; the objects it returns are then shared with the cache: callers never mutate
    what they list.
    """

    def __init__(
        self, client: AsyncClient, *, field_manager: str = FIELD_MANAGER, informers: Sequence[Informer] = ()
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.informers = tuple(informers)
        self.requests = 0  # API calls made; the operator exports it as a metric
        self.cached_reads = 0  # lists answered from an informer
        self._crds: dict[str, tuple[float, bool]] = {}  # CRD name -> (when read, installed)

    def _informer(
        self, api_version: str, kind: str, *, namespace: str | None, labels: Mapping[str, Any] | None
    ) -> Informer | None:
        """A synced informer that can answer this read (counted as a cached read), or None."""
        for informer in self.informers:
            if informer.synced.is_set() and informer.serves(
                api_version=api_version, kind=kind, namespace=namespace, labels=labels
            ):
                self.cached_reads += 1
                return informer
        return None

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        self.requests += 1
        try:
            applied = await self.client.apply(codecs.from_dict(dict(obj)), field_manager=self.field_manager, force=True)
        except ApiError as error:
            if error.status.code == 404:
                # The kind's CRD may have gone since ``crd_exists`` cached it: ask again on the retry.
                self._crds.clear()
            raise
        return strip(applied)

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None:
        informer = self._informer(api_version, kind, namespace=namespace, labels=None)
        if informer is not None:
            return informer.items.get((namespace or "", name))
        self.requests += 1
        try:
            return strip(await self.client.get(resource(api_version, kind), name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[JSON]:
        informer = None if fields else self._informer(api_version, kind, namespace=namespace, labels=labels)
        if informer is not None:
            return informer.select(labels)
        self.requests += 1
        res = resource(api_version, kind)
        selectors: dict[str, Any] = {**_namespace(res, namespace), "labels": dict(labels) if labels else None,
                     "fields": dict(fields) if fields else None}  # fmt: skip
        return [strip(item) async for item in self.client.list(res, **selectors)]

    def list_stream(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str | None] | Selector | None = None,
        fields: str | None = None,
    ) -> _Listing:
        """A paged list straight from the API server (what an informer fills itself with)."""
        self.requests += 1
        res = resource(api_version, kind)
        selectors = _selectors(res, namespace=namespace, labels=labels, fields=fields)
        return _Listing(self.client.list(res, chunk_size=CHUNK, **selectors))

    async def watch(
        self,
        api_version: str,
        kind: str,
        *,
        resource_version: str,
        namespace: str | None = None,
        labels: Mapping[str, str | None] | None = None,
        fields: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """lightkube's watch, which resumes by itself; a 410 Gone raises WatchExpiredError."""
        self.requests += 1
        res = resource(api_version, kind)
        selectors = _selectors(res, namespace=namespace, labels=labels, fields=fields)
        stream = self.client.watch(res, resource_version=resource_version, **selectors)
        # aclosing: a cancelled watch closes its streaming response now, not when it is collected.
        async with contextlib.aclosing(stream) as events:  # type: ignore[type-var]
            try:
                async for kind_of_change, obj in events:
                    yield kind_of_change, strip(obj)
            except ApiError as error:
                if error.status.code == 410:
                    raise WatchExpiredError(str(error)) from error
                raise

    async def delete(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None, grace_seconds: int | None = None
    ) -> bool:
        """Delete; False when it was already gone."""
        self.requests += 1
        try:
            await self.client.delete(resource(api_version, kind), name, namespace=namespace, grace_period=grace_seconds)
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        return True

    async def patch_status(
        self, api_version: str, kind: str, name: str, status: Mapping[str, Any], *, namespace: str | None = None
    ) -> None:
        self.requests += 1
        body = {"status": dict(status)}
        res = resource(api_version, kind).Status
        if namespace:
            await self.client.patch(res, name, body, namespace=namespace, patch_type=PatchType.MERGE)
        else:
            await self.client.patch(res, name, body, patch_type=PatchType.MERGE)

    async def patch_labels(self, api_version: str, kind: str, name: str, labels: Mapping[str, str | None]) -> None:
        self.requests += 1
        await self.client.patch(
            resource(api_version, kind), name, {"metadata": {"labels": dict(labels)}}, patch_type=PatchType.MERGE
        )

    async def event(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool = False, namespace: str
    ) -> None:
        """Record a Kubernetes Event about ``involved`` (shown by ``kubectl describe``)."""
        body = event_body(
            involved=involved, reason=reason, message=message, warning=warning, namespace=namespace,
            component=self.field_manager,
        )  # fmt: skip
        await self.create(body)

    async def create(self, obj: Mapping[str, Any]) -> None:
        """Create an object (an Event; everything the operator owns is applied instead)."""
        self.requests += 1
        await self.client.create(codecs.from_dict(dict(obj)))

    async def patch(
        self, api_version: str, kind: str, name: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> None:
        """A merge patch (what a Node's labels, annotations and cordon change with, in one request)."""
        self.requests += 1
        res = resource(api_version, kind)
        if namespace:
            await self.client.patch(res, name, dict(body), namespace=namespace, patch_type=PatchType.MERGE)
        else:
            await self.client.patch(res, name, dict(body), patch_type=PatchType.MERGE)

    async def json_patch(self, api_version: str, kind: str, name: str, operations: Sequence[Mapping[str, Any]]) -> None:
        """A JSON patch (RFC 6902) of a cluster-scoped object: with a ``test`` operation first, it applies only
        if what was read is still there (the API server answers 422 otherwise), so no other writer's change
        to the same list is lost."""
        self.requests += 1
        body = [dict(op) for op in operations]
        await self.client.patch(resource(api_version, kind), name, body, patch_type=PatchType.JSON)

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        """Ask the Eviction API to evict a pod; PodDisruptionBudgets apply (then BLOCKED)."""
        self.requests += 1
        body = eviction_body(namespace=namespace, name=name)
        try:
            await self.client.create(resource("v1", "Pod").Eviction.from_dict(body), name=name, namespace=namespace)
        except ApiError as error:
            outcome = eviction_outcome(error.status.code or 0)
            if outcome is None:
                raise
            return outcome
        return Eviction.EVICTED

    async def crd_exists(self, name: str, *, max_age: float = 0.0) -> bool:
        """Whether the CRD ``name`` is installed; with ``max_age``, an answer read no longer ago than that
        many seconds is reused (a CRD is one large object, and every reconcile pass asks)."""
        now = time.monotonic()
        known = self._crds.get(name)
        if known is not None and now - known[0] <= max_age:
            return known[1]
        exists = await self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) is not None
        self._crds[name] = (now, exists)
        return exists

    async def names(self, api_version: str, kind: str, *, namespace: str) -> list[str]:
        return [o["metadata"]["name"] for o in await self.list_objects(api_version, kind, namespace=namespace)]

    async def data_keys(self, api_version: str, kind: str, *, namespace: str) -> dict[str, list[str]]:
        """Each object's name -> the keys of its ``data`` and ``binaryData``, sorted: one list, served by
        the informer when one covers it (the ConfigMap cache keeps the keys, ``kube.slim``)."""
        objects = await self.list_objects(api_version, kind, namespace=namespace)
        return {o["metadata"]["name"]: data_keys(o) for o in objects}


def _namespace(res: Any, namespace: str | None) -> dict[str, str]:
    """No namespace means every namespace (as in the REST API), not the client's default one."""
    if namespace:
        return {"namespace": namespace}
    return {"namespace": "*"} if issubclass(res, NamespacedResource) else {}


def _selectors(
    res: Any, *, namespace: str | None, labels: Mapping[str, str | None] | Selector | None, fields: str | None
) -> dict[str, Any]:
    return {**_namespace(res, namespace), "labels": lightkube_labels(labels), "fields": lightkube_fields(fields)}
