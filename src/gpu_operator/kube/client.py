"""The one client protocol of the kube layer: what every reader and writer of the API may call.

Two implementations satisfy :class:`KubeClient`:

- :class:`~gpu_operator.kube.api.Kube`, over lightkube, for the operator and the agents;
- :class:`~gpu_operator.kube.restkube.RestKube`, over the simulator's JSON client
  (``kube.restclient``), which skips typed models where a thousand simulated nodes would pay for them.

Both run against the in-memory API of ``kube.fakeapi`` in the unit tier (``tests/unit/test_kube_client.py``
runs one suite over both), and against a real API server in the integration tier. Objects are plain
dicts without ``managedFields``; a missing object reads as ``None`` and deleting one returns False.

:class:`Listing` and :meth:`KubeClient.watch` are what an informer (``kube.informer``) needs: a list
that says its resourceVersion once read, and a watch that resumes by itself after the server ends a
request and raises :class:`WatchExpiredError` when the version is too old (the informer then lists again).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

from gpu_operator.kube.objects import Eviction
from gpu_operator.names.selectors import Selector

JSON = dict[str, Any]
#: A watch event: ``(type, object)``, the type one of ADDED, MODIFIED, DELETED (bookmarks are kept inside).
WatchEvent = tuple[str, JSON]
#: Objects per list page, for lists that stream (an informer's): a page is decoded at once, so pages of
#: full Nodes are kept small (the first list was the operator's peak memory at 1,000 nodes).
CHUNK = 100


class WatchExpiredError(Exception):
    """410 Gone: the resourceVersion a watch resumed from is no longer kept; list again."""


@runtime_checkable
class Listing(Protocol):
    """A streamed list: iterate it for the objects; then ``resource_version`` says where a watch starts."""

    resource_version: str

    def __aiter__(self) -> AsyncIterator[JSON]: ...


@runtime_checkable
class KubeClient(Protocol):
    """Dict-in, dict-out access to one API server (see the module docstring)."""

    field_manager: str

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None: ...

    async def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[JSON]: ...

    def list_stream(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str | None] | Selector | None = None,
        fields: str | None = None,
    ) -> Listing:
        """A list in pages of :data:`CHUNK`, never served from a cache; ``labels`` a mapping (a value
        None: the key exists) or a parsed selector (any requirement); ``fields`` in the API's text form
        (``spec.nodeName!=``)."""
        ...

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        resource_version: str,
        namespace: str | None = None,
        labels: Mapping[str, str | None] | None = None,
        fields: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version``, until cancelled; :class:`WatchExpiredError` when it is too old."""
        ...

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        """Server-side apply as :attr:`field_manager`, forcing ownership; the object as stored."""
        ...

    async def create(self, obj: Mapping[str, Any]) -> None: ...

    async def patch(
        self, api_version: str, kind: str, name: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> None:
        """A merge patch."""
        ...

    async def patch_status(self, api_version: str, kind: str, name: str, status: Mapping[str, Any]) -> None: ...

    async def delete(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None, grace_seconds: int | None = None
    ) -> bool:
        """Delete; False when it was already gone."""
        ...

    async def evict(self, *, namespace: str, name: str) -> Eviction: ...

    async def event(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool = False, namespace: str
    ) -> None:
        """Record a Kubernetes Event about ``involved``."""
        ...


def is_expired(error: BaseException) -> bool:
    """Whether ``error`` means "the resourceVersion is too old" (ours, or lightkube's 410)."""
    if isinstance(error, WatchExpiredError):
        return True
    status = getattr(error, "status", None)
    return getattr(status, "code", None) == 410 or getattr(error, "code", None) == 410
