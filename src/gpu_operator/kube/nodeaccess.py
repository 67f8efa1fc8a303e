"""The agents' access to their own Node: labels and annotations read and merge-patched, GFD's NodeFeature applied.

:class:`LightkubeNode` implements ``agents.runtime.NodeAccess`` over lightkube with the pod's service
account (made lazily: only real nodes need it), or over a client the caller gives (tests pass one on
``kube.fakeapi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIELD_MANAGER = "gpu-operator-agent"


class LightkubeNode:
    """NodeAccess over the in-cluster API (lightkube, imported lazily: only real nodes need it)."""

    def __init__(self, *, name: str, client: Any = None) -> None:
        self.name = name
        self._client: Any = client  # an AsyncClient; made from the pod's service account when None

    def _api(self) -> Any:
        if self._client is None:
            from lightkube import AsyncClient  # noqa: PLC0415 - only on real nodes

            self._client = AsyncClient(field_manager=FIELD_MANAGER)
        return self._client

    async def labels(self) -> dict[str, str]:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415

        node = await self._api().get(Node, self.name)
        return dict(node.metadata.labels or {})

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415

        # A merge patch: null removes a label, other labels on the node stay untouched.
        await self._api().patch(Node, self.name, {"metadata": {"labels": dict(changes)}})

    async def annotations(self) -> dict[str, str]:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415

        node = await self._api().get(Node, self.name)
        return dict(node.metadata.annotations or {})

    async def patch_annotations(self, changes: Mapping[str, str | None]) -> None:
        from lightkube.resources.core_v1 import Node  # noqa: PLC0415

        # A merge patch, as for labels (the OFED safe-load init container's annotation).
        await self._api().patch(Node, self.name, {"metadata": {"annotations": dict(changes)}})

    async def apply_node_feature(self, body: Mapping[str, Any]) -> None:
        """Server-side apply of GFD's NFD NodeFeature object."""
        from lightkube import codecs  # noqa: PLC0415
        from lightkube.generic_resource import create_namespaced_resource  # noqa: PLC0415

        create_namespaced_resource("nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures")
        await self._api().apply(codecs.from_dict(dict(body)), field_manager=FIELD_MANAGER, force=True)
