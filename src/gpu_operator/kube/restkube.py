"""The second :class:`~gpu_operator.kube.client.KubeClient`: the simulator's JSON client, by kind and name.

``kube.restclient.ApiClient`` speaks paths; :class:`RestKube` speaks what the rest of the kube layer
speaks (``apiVersion``, kind, namespace, name) so that an informer, or any code written against the
protocol, runs on it unchanged. It builds paths from lightkube's resource registry once per kind (the
custom kinds are registered by ``kube.api``) and never builds typed models, which is why the simulator
keeps this client at a thousand nodes.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

from lightkube.core.resource import NamespacedResource, api_info

from gpu_operator.kube.api import FIELD_MANAGER, resource
from gpu_operator.kube.client import CHUNK, WatchEvent, WatchExpiredError
from gpu_operator.kube.objects import Eviction, event_body, eviction_body, eviction_outcome
from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.names.selectors import Selector, of_mapping

JSON = dict[str, Any]
#: How long one watch request runs before the server ends it and the watch resumes.
WATCH_TIMEOUT_SECONDS = "300"


@functools.lru_cache(maxsize=256)
def _collection(api_version: str, kind: str) -> tuple[str, str, bool]:
    """(prefix, plural, namespaced) of a kind: ``("/api/v1", "pods", True)``."""
    res = resource(api_version, kind)
    info = api_info(res)
    group, version = info.resource.group, info.resource.version
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return prefix, info.plural, issubclass(res, NamespacedResource)


def api_path(api_version: str, kind: str, *, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection or, with ``name``, of one object."""
    prefix, plural, namespaced = _collection(api_version, kind)
    path = f"{prefix}/namespaces/{quote(namespace)}/{plural}" if namespaced and namespace else f"{prefix}/{plural}"
    return f"{path}/{quote(name)}" if name else path


def _strip(obj: JSON) -> JSON:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def _label_text(labels: Mapping[str, Any] | Selector | None) -> str:
    if isinstance(labels, Selector):
        return labels.text()
    if not labels:
        return ""
    if any(not (value is None or isinstance(value, str)) for value in labels.values()):
        raise TypeError(f"RestKube takes equality and existence label selectors only, not {dict(labels)!r}")
    return of_mapping(labels).text()


def _query(*, labels: Mapping[str, Any] | Selector | None, fields: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if text := _label_text(labels):
        out["labelSelector"] = text
    if fields:
        out["fieldSelector"] = fields
    return out


class _Listing:
    """A list in pages of ``CHUNK`` (``limit``/``continue``), as one stream of objects."""

    def __init__(self, api: ApiClient, path: str, params: dict[str, str]) -> None:
        self._api, self._path, self._params = api, path, params
        self.resource_version = ""

    async def __aiter__(self) -> AsyncIterator[JSON]:
        token = ""
        while True:
            params = {**self._params, "limit": str(CHUNK), **({"continue": token} if token else {})}
            page = await self._api.get(self._path, params=params)
            for obj in page.get("items") or []:
                yield _strip(obj)
            meta = page.get("metadata") or {}
            self.resource_version = str(meta.get("resourceVersion", ""))
            token = str(meta.get("continue") or "")
            if not token:
                return


class RestKube:
    """:class:`~gpu_operator.kube.client.KubeClient` over :class:`~gpu_operator.kube.restclient.ApiClient`."""

    def __init__(self, api: ApiClient, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None:
        try:
            return _strip(await self.api.get(api_path(api_version, kind, namespace=namespace, name=name)))
        except ApiError as error:
            if error.code == 404:
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
        field_text = ",".join(f"{key}={value}" for key, value in (fields or {}).items())
        return [obj async for obj in self.list_stream(api_version, kind, namespace=namespace, labels=labels,
                                                      fields=field_text)]  # fmt: skip

    def list_stream(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str | None] | Selector | None = None,
        fields: str | None = None,
    ) -> _Listing:
        path = api_path(api_version, kind, namespace=namespace)
        return _Listing(self.api, path, _query(labels=labels, fields=fields))

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
        path = api_path(api_version, kind, namespace=namespace)
        base = {**_query(labels=labels, fields=fields), "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        version = resource_version
        while True:  # each request ends after WATCH_TIMEOUT_SECONDS; resume from the last version seen
            async for event in self.api.watch(path, params={**base, "resourceVersion": version}):
                kind_of_change = str(event.get("type", ""))
                obj = event.get("object") or {}
                if kind_of_change == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpiredError(str(obj.get("message", "resourceVersion too old")))
                    raise ApiError(code=int(obj.get("code", 500)), reason=str(obj.get("reason")), message=str(obj))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind_of_change in ("ADDED", "MODIFIED", "DELETED"):
                    yield kind_of_change, _strip(obj)

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        meta = obj.get("metadata") or {}
        path = api_path(str(obj["apiVersion"]), str(obj["kind"]), namespace=meta.get("namespace"), name=meta["name"])
        params = {"fieldManager": self.field_manager, "force": "true"}
        return _strip(await self.api.patch(path, dict(obj), kind="apply", want=True, params=params))

    async def create(self, obj: Mapping[str, Any]) -> None:
        namespace = (obj.get("metadata") or {}).get("namespace")
        await self.api.post(api_path(str(obj["apiVersion"]), str(obj["kind"]), namespace=namespace), dict(obj),
                            want=False)  # fmt: skip

    async def patch(
        self, api_version: str, kind: str, name: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> None:
        await self.api.patch(api_path(api_version, kind, namespace=namespace, name=name), dict(body))

    async def patch_status(self, api_version: str, kind: str, name: str, status: Mapping[str, Any]) -> None:
        path = api_path(api_version, kind, name=name) + "/status"
        await self.api.patch(path, {"status": dict(status)})

    async def delete(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None, grace_seconds: int | None = None
    ) -> bool:
        path = api_path(api_version, kind, namespace=namespace, name=name)
        return await self.api.delete(path, grace_seconds=grace_seconds)

    async def evict(self, *, namespace: str, name: str) -> Eviction:
        path = api_path("v1", "Pod", namespace=namespace, name=name) + "/eviction"
        try:
            await self.api.post(path, eviction_body(namespace=namespace, name=name), want=False)
        except ApiError as error:
            outcome = eviction_outcome(error.code)
            if outcome is None:
                raise
            return outcome
        return Eviction.EVICTED

    async def event(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool = False, namespace: str
    ) -> None:
        body = event_body(
            involved=involved, reason=reason, message=message, warning=warning, namespace=namespace,
            component=self.field_manager,
        )  # fmt: skip
        await self.create(body)
