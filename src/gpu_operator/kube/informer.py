"""Informers: list-then-watch caches of the objects the operator reads on every pass.

An :class:`Informer` lists one kind (in one namespace, under one label and one field selector) once,
then follows a watch from the list's resourceVersion, and keeps each object passed through a ``transform`` that drops
what no pass reads (``kube.slim``). A pass then reads memory instead of listing a thousand Nodes or
driver pods from the API server: the list was most of the operator's memory and of its time per pass.

Each change that survives the transform is reported to ``on_change(old, new)`` (``None`` for a missing
side), after the cache holds it, so a woken pass always sees the change that woke it. A change the
transform erases (a kubelet heartbeat that only moves condition timestamps) is no change at all.

When the watch breaks (the API server restarts, or answers 410 Gone for a too-old resourceVersion)
the informer lists again and replaces its contents, reporting what appeared, changed or vanished in
between, so nothing is lost across an outage. An object replaced by another of the same name (a new
uid) between two lists is reported as deleted, then added. :class:`~gpu_operator.kube.api.Kube` serves
a list from an informer only once it has synced; until then (and for any query it cannot serve) it asks
the API.

An informer reads through any :class:`~gpu_operator.kube.client.KubeClient`: the operator's and the
agents' over lightkube, the simulator's over its JSON client (its one watch of every bound pod). One
retry policy serves all: 1 s doubling to 30 s while lists keep failing, or what the API server's
``Retry-After`` asks; at most 2 s while the API server answers 5xx (etcd away); a 410 Gone lists again
at once; a throttled watch (429) watches again, after that wait, from the last version it saw, without
a list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx

from gpu_operator.kube.client import KubeClient, is_expired
from gpu_operator.names.selectors import of_mapping
from gpu_operator.runtime.backoff import Backoff, error_kind, retry_after, status_code

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
Transform = Callable[[JSON], JSON]
Listener = Callable[[JSON | None, JSON | None], None]
Selector = Mapping[str, str | None]  # value None: the label exists; else equality (what list_objects takes)

log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
#: While the API server cannot even be connected to (restarting, an outage), every cache tries again this
#: often: a refused connection costs the server nothing, and the caches must be current the moment it is
#: back (issue 22: reconciling again within 3 s of a 120 s outage), not up to 30 s later.
UNREACHABLE_RETRY_SECONDS = 1.0
#: "Too many requests": the API server sheds load (max-in-flight, priority and fairness) before it serves
#: the watch. Nothing about the cache is wrong, so listing every object again would only add to that load.
THROTTLED = 429
SERVER_ERROR = 500
#: At most this long between tries while the API server answers 5xx (its storage is away).
SERVER_TROUBLE_RETRY_SECONDS = 2.0


def _identity(obj: JSON) -> JSON:
    return obj


def matches(labels: Mapping[str, str], selector: Selector) -> bool:
    """Whether ``labels`` satisfy ``selector`` (None: the key exists; a string: equality)."""
    return of_mapping(selector).matches(labels)


def _uid(obj: JSON) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass(eq=False)
class Informer:
    """A cache of one query's objects (see the module docstring)."""

    client: KubeClient
    api_version: str
    kind: str
    namespace: str | None = None
    labels: Selector = field(default_factory=dict)
    fields: str | None = None  # a field selector in the API's text form (``spec.nodeName!=``)
    transform: Transform = _identity
    on_change: Listener | None = None
    items: dict[Key, JSON] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    lists: int = 0  # how often it listed (1 + recoveries): a test and the benchmarks read it
    retry_seconds: float = RETRY_SECONDS
    changes: int = 0  # changes reported (what woke the operator): the benchmarks read it
    # The items in name order, kept until the next change: every pass lists the Nodes several times, and
    # sorting 5,000 of them each time was a tenth of a pass's CPU (issue 23).
    _ordered: list[JSON] | None = field(default=None, repr=False)
    _version: str = field(default="", repr=False)  # the resourceVersion the cache is whole at
    _events: int = field(default=0, repr=False)  # watch events received (bookmarks included)

    def serves(self, *, api_version: str, kind: str, namespace: str | None, labels: Selector | None) -> bool:
        """Whether a list query can be answered from this cache: same kind and namespace, and a label
        selector at least as narrow as the informer's own (the rest is filtered here)."""
        if (api_version, kind) != (self.api_version, self.kind) or (namespace or None) != self.namespace:
            return False
        if self.fields:
            return False  # a field-selected cache answers only its owner, which reads ``items`` itself
        query = dict(labels or {})
        if any(not (v is None or isinstance(v, str)) for v in query.values()):
            return False  # set-based selectors (in_, not_in...) go to the API server
        # An informer of "key exists" (None) also answers a query for one value of that key.
        return all(key in query and (want is None or query[key] == want) for key, want in self.labels.items())

    def select(self, labels: Selector | None = None) -> list[JSON]:
        """The cached objects whose labels satisfy ``labels``, in name order (as the API lists them)."""
        if self._ordered is None:
            self._ordered = [obj for _, obj in sorted(self.items.items())]
        out = list(self._ordered)
        if labels:
            wanted = of_mapping(labels)  # built once per query, not once per cached object
            out = [o for o in out if wanted.matches((o.get("metadata") or {}).get("labels") or {})]
        return out

    async def run(self, *, stop: asyncio.Event) -> None:
        """List, then watch until the watch breaks; list again; until ``stop``. Retries back off (doubling
        to 30 s, or as the API server's Retry-After says) while lists keep failing, so a denied or absent
        kind does not hammer the API server. Whatever a list or watch raises only means "list again",
        except a throttled watch (429): the cache is still whole up to the last event it applied, so after
        the server's wait the watch resumes from there, without listing every object again."""
        backoff = Backoff(initial=self.retry_seconds, ceiling=MAX_RETRY_SECONDS)
        streak = 0  # failures in a row: an outage is logged once, not once a second
        resume: str | None = None  # where a throttled watch picks up again; None: list first
        delivered = self._events
        while not stop.is_set():
            error: Exception | None = None
            try:
                if resume is None:
                    self._version = await self._relist()
                    if streak > 1:
                        log.info("%s informer: listed again after %d failed tries", self.kind, streak)
                    streak = 0
                    backoff.reset()
                resume = None
                delivered = self._events
                await self._follow_until(self._version, stop=stop)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # httpx surfaces stream errors as various types: all mean "list again"
                if self._events > delivered:  # a watch that delivered was a success: a later break starts afresh
                    streak = 0
                    backoff.reset()
                if is_expired(exc):
                    log.info("%s informer: resourceVersion expired, listing again", self.kind)
                    continue  # nothing is wrong with the server: list again at once
                error, streak = exc, streak + 1
                throttled = status_code(exc) == THROTTLED and self.synced.is_set()
                resume = self._version if throttled else None
                level = logging.INFO if streak == 1 else logging.DEBUG
                then = f"watching again from {resume}" if throttled else "listing again"
                log.log(level, "%s informer: watch broken (%s), %s: %s", self.kind, error_kind(exc), then, exc)
            if isinstance(error, httpx.ConnectError):
                backoff.reset()  # an answer after the outage, even an error, starts the doubling afresh
                delay = min(UNREACHABLE_RETRY_SECONDS, self.retry_seconds)
            else:
                delay = backoff.next(error)
                if error is not None and (status_code(error) or 0) >= SERVER_ERROR:
                    # The API server is up but its storage is not (etcd restarting): its own trouble, over in
                    # seconds, and an answer costs it little. Doubling to 30 s left caches 8 s behind etcd's
                    # return; a Retry-After it sends is still kept.
                    delay = min(delay, max(SERVER_TROUBLE_RETRY_SECONDS, retry_after(error) or 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    def _selectors(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "labels": dict(self.labels) or None, "fields": self.fields}

    async def _relist(self) -> str:
        listing = self.client.list_stream(self.api_version, self.kind, **self._selectors())
        fresh: dict[Key, JSON] = {}
        async for obj in listing:
            slim = self._slim(obj)
            fresh[_key(slim)] = slim
        version = listing.resource_version
        before, self.items = self.items, fresh
        self._ordered = None
        self.lists += 1
        self.synced.set()
        for key in before.keys() - fresh.keys():
            self._notify(before[key], None)
        for key, obj in fresh.items():
            old = before.get(key)
            if old is not None and _uid(old) != _uid(obj):
                self._notify(old, None)  # another object of the same name: the old one is gone
                old = None
            if old != obj:
                self._notify(old, obj)
        return version

    async def _follow_until(self, version: str, *, stop: asyncio.Event) -> None:
        """Follow the watch until it breaks (its error is raised here) or ``stop`` is set."""
        await _until_stopped(self._follow(version), stop=stop)

    async def _follow(self, version: str) -> None:
        stream = self.client.watch(self.api_version, self.kind, resource_version=version, **self._selectors())
        # aclosing: a cancelled informer closes its streaming response now, not when it is collected.
        async with contextlib.aclosing(stream) as events:  # type: ignore[type-var]
            async for kind, obj in events:
                self._events += 1
                self.apply(kind, obj)
                # Bookmarks included: the newest version the cache is whole at, where a resumed watch starts.
                self._version = str((obj.get("metadata") or {}).get("resourceVersion") or self._version)

    def apply(self, kind: str, obj: JSON) -> None:
        """One watch event into the cache (public: the unit tests feed events through it)."""
        if kind == "BOOKMARK":
            return
        key = _key(obj)
        old = self.items.get(key)
        if kind == "DELETED":
            if self.items.pop(key, None) is not None:
                self._ordered = None
                self._notify(old, None)
            return
        slim = self._slim(obj)
        if old == slim:
            return  # nothing a pass reads has changed (a heartbeat, a status timestamp)
        self.items[key] = slim
        self._ordered = None
        self._notify(old, slim)

    def _slim(self, obj: JSON) -> JSON:
        slim = self.transform(obj)
        # List items can come without apiVersion/kind; a cached object always says what it is.
        slim.setdefault("apiVersion", self.api_version)
        slim.setdefault("kind", self.kind)
        return slim

    def _notify(self, old: JSON | None, new: JSON | None) -> None:
        self.changes += 1
        if self.on_change is not None:
            self.on_change(old, new)


async def _until_stopped(work: Awaitable[Any], *, stop: asyncio.Event, timeout: float | None = None) -> None:
    """Run ``work`` until it ends (its error is raised here), ``stop`` is set or ``timeout`` passes;
    whatever is left is cancelled."""
    task: asyncio.Future[Any] = asyncio.ensure_future(work)
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    finished = False
    try:
        await asyncio.wait({task, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Decided before cancelling: a gather cancelled here can end with CancelledError as its
        # *exception* (not as cancelled) once its children have gone, which is no error of the work.
        finished = task.done()
        for future in (task, stopped):
            future.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
    if finished and not task.cancelled():
        task.result()
    else:
        await asyncio.gather(task, return_exceptions=True)


def watching(client: Any, api_version: str, kind: str, **options: Any) -> Informer:
    """An informer of ``apiVersion``/``kind`` read through ``client``: a :class:`KubeClient`, or a
    lightkube ``AsyncClient`` (then through a :class:`~gpu_operator.kube.api.Kube` of its own, which
    knows the custom kinds); ``options`` are :class:`Informer`'s fields."""
    from gpu_operator.kube.api import Kube  # noqa: PLC0415 - it imports us

    source = client if isinstance(client, KubeClient) else Kube(client)
    return Informer(source, api_version, kind, **options)


async def wait_synced(informers: Sequence[Informer], *, stop: asyncio.Event, timeout: float) -> bool:
    """Wait until every informer has listed once (or ``stop``, or ``timeout``); False if some have not.

    A process that starts working before its caches are filled reads everything from the API server
    at once: at a thousand nodes that doubled a restarted operator's memory.
    """
    await _until_stopped(asyncio.gather(*(i.synced.wait() for i in informers)), stop=stop, timeout=timeout)
    missing = [f"{i.kind} {dict(i.labels) or ''}".strip() for i in informers if not i.synced.is_set()]
    if missing and not stop.is_set():
        log.warning("caches not filled after %.0f s (%s): those reads go to the API server", timeout, missing)
    return not missing
