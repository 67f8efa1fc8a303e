"""Reading what DaemonSet readiness needs from the cluster, shared by both reconcilers.

A DaemonSet's status is enough for RollingUpdate; an OnDelete DaemonSet (the driver) is judged by its
pods' revision hashes, so only then are its pods and ControllerRevisions listed.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.render.readiness import Readiness, state_readiness


async def readiness_of(kube: Kube, *, names: Sequence[str], namespace: str) -> Readiness:
    """Readiness of the named DaemonSets together (a missing one is "not created yet")."""
    live = {name: await kube.get("apps/v1", "DaemonSet", name, namespace=namespace) for name in names}
    pods: dict[str, list[JSON]] = {}
    revisions: dict[str, list[JSON]] = {}
    for name, ds in live.items():
        if ds and (ds.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete":
            selector = ds["spec"]["selector"].get("matchLabels", {})
            pods[name] = await kube.list_objects("v1", "Pod", namespace=namespace, labels=selector)
            revisions[name] = await kube.list_objects(
                "apps/v1", "ControllerRevision", namespace=namespace, labels=selector
            )
    return state_readiness(live, pods=pods, revisions=revisions)
