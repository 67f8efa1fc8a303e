"""An in-memory Kubernetes API behind lightkube's HTTP transport, for fast tests with no sockets.

``FakeApi().client()`` is a real ``lightkube.AsyncClient`` whose requests never leave the process:
the operator's own code (``kube.Kube``, the informers, the Lease) runs unchanged over it.
``FakeApi().rest_client()`` is the simulator's JSON client (``kube.restclient``) over the same objects. It keeps
objects by path and serves what the operator uses: get, list (label and field selectors), create,
server-side apply, merge patches (a recursive merge; lists are replaced) and JSON patches, ``/status`` patches,
delete, eviction and watches (replayed from the resourceVersion asked for, then live).

:meth:`FakeApi.fail` injects faults by method and path: an exception the transport raises
(``httpx.ConnectError``, ``httpx.ReadTimeout``: what lightkube raises when the network fails) or an
HTTP answer (500, 429 with ``Retry-After``, 410 Gone). Test assertions read :attr:`FakeApi.objects`.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx as httpx1  # the simulator's JSON client's HTTP library (lightkube's is httpx2)
import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from gpu_operator.kube.restclient import ApiClient, ClusterAccess
from gpu_operator.names.selectors import matches_text

JSON = dict[str, Any]
Key = tuple[str, str, str, str]  # (group/version, plural, namespace, name)
SERVER = "http://fake-api.invalid"


@dataclass
class Fault:
    """Answer ``times`` matching requests with ``error`` (raised) or ``status`` (returned)."""

    method: str | None
    path: str  # a regular expression searched in the request's path and query (``?watch=true``)
    times: int
    error: Exception | None = None
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None  # and, when given, a regular expression searched in the request body
    hits: int = 0

    def matches(self, request: httpx.Request) -> bool:
        return (
            self.hits < self.times
            and (self.method is None or request.method == self.method)
            and re.search(self.path, request.url.raw_path.decode()) is not None
            and (self.body is None or re.search(self.body, request.content.decode(errors="replace")) is not None)
        )


def _merge(into: JSON, patch: JSON) -> JSON:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def _parse(path: str) -> tuple[str, str, str, str, str]:
    """(group/version, plural, namespace, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        gv, rest = parts[1], parts[2:]
    else:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    rest += [""] * (3 - len(rest))
    return gv, rest[0], namespace, rest[1], rest[2]


def _fields_match(obj: JSON, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        current: Any = obj
        for part in path.lstrip("=").split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if (str(current if current is not None else "") == value) == negate:
            return False
    return True


class _WatchStream(httpx.AsyncByteStream):
    def __init__(self, api: FakeApi, queue: asyncio.Queue[JSON]) -> None:
        self.api, self.queue = api, queue

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            event = await self.queue.get()
            yield (json.dumps(event) + "\n").encode()

    async def aclose(self) -> None:
        self.api.watchers.pop(id(self.queue), None)


@dataclass
class FakeApi(httpx.AsyncBaseTransport):
    """The in-memory API server (see the module docstring)."""

    objects: dict[Key, JSON] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request
    events: list[tuple[int, Key, JSON]] = field(default_factory=list)  # (resourceVersion, key, watch event)
    watchers: dict[int, tuple[str, str, str, str, str, asyncio.Queue[JSON]]] = field(default_factory=dict)
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def client(self, *, field_manager: str = "gpu-operator", namespace: str = "default") -> AsyncClient:
        config = KubeConfig.from_one(cluster=Cluster(server=SERVER), user=User(token="fake"), namespace=namespace)
        return AsyncClient(config=config, field_manager=field_manager, transport=self)

    def rest_client(self) -> ApiClient:
        """The simulator's JSON client (``kube.restclient.ApiClient``) with this fake as its server."""
        return ApiClient(access=ClusterAccess(server=SERVER, token="fake"), transport=_RestBridge(self))

    def fail(
        self,
        *,
        path: str,
        method: str | None = None,
        times: int = 1,
        error: Exception | None = None,
        status: int = 500,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> Fault:
        fault = Fault(
            method=method, path=path, times=times, error=error, status=status, headers=headers or {}, body=body
        )
        self.faults.append(fault)
        return fault

    def put(self, obj: JSON, *, plural: str) -> JSON:
        """Store an object directly (test setup), as a create would."""
        api_version = obj["apiVersion"]
        meta = obj["metadata"]
        key = (api_version, plural, meta.get("namespace", ""), meta["name"])
        return self._store(key, copy.deepcopy(obj), "ADDED")

    def get(self, api_version: str, plural: str, name: str, namespace: str = "") -> JSON | None:
        return self.objects.get((api_version, plural, namespace, name))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        for fault in self.faults:
            if fault.matches(request):
                fault.hits += 1
                if fault.error is not None:
                    raise fault.error
                return self._status(fault.status, "injected fault", headers=fault.headers)
        await asyncio.sleep(0)  # an API call always yields to the event loop, as a real one does
        gv, plural, namespace, name, sub = _parse(request.url.path)
        query = {k: v[-1] for k, v in parse_qs(urlsplit(str(request.url)).query).items()}
        key = (gv, plural, namespace, name)
        body = json.loads(request.content) if request.content else {}
        if request.method == "GET" and not name:
            return self._watch(gv, plural, namespace, query) if query.get("watch") else self._list(key, query)
        if request.method == "GET":
            found = self.objects.get(key)
            return self._json(found) if found is not None else self._status(404, f'{plural} "{name}" not found')
        if request.method == "POST" and sub == "eviction":
            return self._delete(key) if key in self.objects else self._status(404, "not found")
        if request.method == "POST":
            meta = body.setdefault("metadata", {})
            if namespace:
                meta.setdefault("namespace", namespace)
            if "name" not in meta:  # generateName: the API server picks a unique suffix
                meta["name"] = f"{meta.get('generateName', '')}{next(self._versions):05d}"
            created = (gv, plural, namespace, meta["name"])
            if created in self.objects:
                return self._status(409, f'{plural} "{meta["name"]}" already exists')
            return self._json(self._store(created, body, "ADDED"), code=201)
        if request.method == "PATCH" and "json-patch" in request.headers.get("content-type", ""):
            return self._json_patch(key, list(body))
        if request.method == "PATCH":
            return self._patch(key, sub, body, request.headers.get("content-type", ""))
        if request.method == "DELETE":
            return self._delete(key) if key in self.objects else self._status(404, f'{plural} "{name}" not found')
        return self._status(405, f"{request.method} not served by the fake API")

    def _list(self, key: Key, query: dict[str, str]) -> httpx.Response:
        gv, plural, namespace, _ = key
        items = [
            obj
            for (g, p, ns, _), obj in sorted(self.objects.items())
            if (g, p) == (gv, plural) and (not namespace or ns == namespace) and self._selected(obj, query)
        ]
        version = str(self.events[-1][0] if self.events else 0)
        return self._json({"apiVersion": gv, "kind": "List", "metadata": {"resourceVersion": version}, "items": items})

    @staticmethod
    def _selected(obj: JSON, query: dict[str, str]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return matches_text(labels, query.get("labelSelector", "")) and _fields_match(
            obj, query.get("fieldSelector", "")
        )

    def _watch(self, gv: str, plural: str, namespace: str, query: dict[str, str]) -> httpx.Response:
        queue: asyncio.Queue[JSON] = asyncio.Queue()
        since = int(query.get("resourceVersion") or 0)
        selectors = (query.get("labelSelector", ""), query.get("fieldSelector", ""))
        for version, (g, p, ns, _), event in self.events:
            wanted = version > since and (g, p) == (gv, plural) and (not namespace or ns == namespace)
            if wanted and self._selected(
                event["object"], {"labelSelector": selectors[0], "fieldSelector": selectors[1]}
            ):
                queue.put_nowait(event)
        self.watchers[id(queue)] = (gv, plural, namespace, *selectors, queue)
        return httpx.Response(200, headers={"content-type": "application/json"}, stream=_WatchStream(self, queue))

    def _json_patch(self, key: Key, operations: list[JSON]) -> httpx.Response:
        """RFC 6902 ``test``, ``add``, ``replace`` and ``remove`` on object paths (``/spec/taints``): a failed
        test is the API server's 422 and changes nothing."""
        current = self.objects.get(key)
        if current is None:
            return self._status(404, f'{key[1]} "{key[3]}" not found')
        obj = copy.deepcopy(current)
        for op in operations:
            *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
            target = obj
            for part in parents:
                target = target.setdefault(part, {})
            if op["op"] == "test" and target.get(last) != op["value"]:
                return self._status(422, f"the test of {op['path']} failed")
            if op["op"] in ("add", "replace"):
                target[last] = op["value"]
            elif op["op"] == "remove":
                target.pop(last, None)
        return self._json(self._store(key, obj, "MODIFIED"))

    def _patch(self, key: Key, sub: str, body: JSON, content_type: str) -> httpx.Response:
        current = self.objects.get(key)
        if current is None and "apply-patch" not in content_type:
            return self._status(404, f'{key[1]} "{key[3]}" not found')
        obj = copy.deepcopy(current) if current is not None else {"metadata": {"name": key[3]}}
        if key[2]:
            obj["metadata"]["namespace"] = key[2]
        if sub == "status":
            body = {"status": body.get("status") or {}}
        if "apply-patch" in content_type and sub != "status":
            # Apply owns what it sends: labels and annotations merge, the rest of spec is replaced.
            for part in ("spec", "data"):
                if part in body:
                    obj.pop(part, None)
        _merge(obj, body)
        return self._json(self._store(key, obj, "MODIFIED" if current is not None else "ADDED"))

    def _delete(self, key: Key) -> httpx.Response:
        obj = self.objects.pop(key)
        self._emit(key, "DELETED", obj)
        return self._json({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": key[3]}})

    def _store(self, key: Key, obj: JSON, kind: str) -> JSON:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{key[1]}-{key[2]}-{key[3]}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        obj.setdefault("apiVersion", key[0])
        self.objects[key] = obj
        self._emit(key, kind, obj)
        return obj

    def _emit(self, key: Key, kind: str, obj: JSON) -> None:
        version = next(self._versions)
        obj.setdefault("metadata", {})["resourceVersion"] = str(version)
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self.events.append((version, key, event))
        for gv, plural, namespace, labels, fields, queue in list(self.watchers.values()):
            wanted = (gv, plural) == key[:2] and (not namespace or namespace == key[2])
            if wanted and self._selected(obj, {"labelSelector": labels, "fieldSelector": fields}):
                queue.put_nowait(event)

    @staticmethod
    def _json(obj: JSON, *, code: int = 200) -> httpx.Response:
        return httpx.Response(code, json=obj)

    @staticmethod
    def _status(code: int, message: str, *, headers: dict[str, str] | None = None) -> httpx.Response:
        reason = {404: "NotFound", 409: "AlreadyExists", 410: "Expired", 429: "TooManyRequests"}.get(code, "Error")
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
                "code": code}  # fmt: skip
        return httpx.Response(code, json=body, headers=headers or {})


class _Bytes(httpx1.AsyncByteStream):
    """An httpx2 response body (a watch's stream included) as an httpx one."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self.stream, "aclose", None)
        if close is not None:
            await close()


class _RestBridge(httpx1.AsyncBaseTransport):
    """Carries the JSON client's httpx requests to the fake, which answers in lightkube's httpx2."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api

    async def handle_async_request(self, request: httpx1.Request) -> httpx1.Response:
        content = await request.aread()
        inner = httpx.Request(request.method, str(request.url), headers=request.headers.raw, content=content)
        answer = await self.api.handle_async_request(inner)
        return httpx1.Response(answer.status_code, headers=answer.headers.raw, stream=_Bytes(answer.stream))
