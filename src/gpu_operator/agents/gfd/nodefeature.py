"""GFD's third output: an NFD ``NodeFeature`` object (``nfd.k8s-sigs.io/v1alpha1``) per node.

Used when ``GFD_USE_NODE_FEATURE_API`` (or ``USE_NODE_FEATURE_API``) is true: NFD's master turns the
object's ``spec.labels`` into node labels, so GFD needs no host path and NFD stays the labels' single
writer. The object is ``nvidia-features-for-<node>`` in ``NAMESPACE`` with the label
``nfd.node.kubernetes.io/node-name=<node>``, as upstream names it; it is written only when the labels
change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from gpu_operator.api.envtext import env_flag

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
PLURAL = "nodefeatures"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


@runtime_checkable
class NodeFeatureAccess(Protocol):
    """What the context's node access offers when it can write NodeFeature objects."""

    async def apply_node_feature(self, body: Mapping[str, Any]) -> None:
        """Create or replace the NodeFeature ``body`` (its namespace and name are in its metadata)."""
        ...


def node_feature(*, node: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The NodeFeature object carrying ``labels`` for ``node``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeFeature",
        "metadata": {
            "name": f"nvidia-features-for-{node}",
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: node},
        },
        "spec": {"labels": dict(sorted(labels.items())), "features": {}},
    }


def use_node_feature_api(env: Mapping[str, str]) -> bool:
    """``GFD_USE_NODE_FEATURE_API`` (or upstream's older ``USE_NODE_FEATURE_API``), refused unless a boolean."""
    name = "GFD_USE_NODE_FEATURE_API" if env.get("GFD_USE_NODE_FEATURE_API", "").strip() else "USE_NODE_FEATURE_API"
    return env_flag(env, name, default=False)
