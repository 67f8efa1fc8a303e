"""Reading what DaemonSet readiness needs from the cluster, shared by both reconcilers.

A DaemonSet's status is enough for RollingUpdate; an OnDelete DaemonSet (the driver) is judged by its
pods' revision hashes, so only then are its pods and ControllerRevisions listed. A caller that has just
listed or applied the DaemonSets passes them in (``known``) to save one read each.

A DaemonSet whose controller has not yet observed its latest generation is not ready, whatever its
(old or still empty) status says: a just-created one has no status at all, which
``observe.readiness`` would read as "no node selected" and so as ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.observe.eligible import eligible_nodes
from gpu_operator.observe.readiness import Readiness, state_readiness

COMPONENT_LABEL = "app.kubernetes.io/component"


def _unobserved(ds: JSON) -> bool:
    generation = int((ds.get("metadata") or {}).get("generation") or 0)
    return int((ds.get("status") or {}).get("observedGeneration") or 0) < generation


async def readiness_of(
    kube: Kube,
    *,
    names: Sequence[str],
    namespace: str,
    known: Mapping[str, JSON] | None = None,
    nodes: Sequence[JSON] | None = None,
) -> Readiness:
    """Readiness of the named DaemonSets together (a missing one is "not created yet"); with ``nodes``,
    a DaemonSet whose controller has scheduled fewer pods than the nodes it should run on is not ready."""
    known = known or {}
    live = {
        name: known[name] if name in known else await kube.get("apps/v1", "DaemonSet", name, namespace=namespace)
        for name in names
    }
    for name, ds in live.items():
        if ds and _unobserved(ds):
            return Readiness(ready=False, reason=f"{name}: the controller has not observed the latest spec yet")
    pods: dict[str, list[JSON]] = {}
    revisions: dict[str, list[JSON]] = {}
    for name, ds in live.items():
        if ds and (ds.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete":
            selector = ds["spec"]["selector"].get("matchLabels", {})
            # The template's component label narrows nothing (every pod and revision of the DaemonSet has
            # it) but lets the operator's driver informers answer instead of the API server.
            template = ((ds["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            component = {k: v for k, v in template.items() if k == COMPONENT_LABEL}
            narrowed = {**selector, **component}
            pods[name] = await kube.list_objects("v1", "Pod", namespace=namespace, labels=narrowed)
            revisions[name] = await kube.list_objects(
                "apps/v1", "ControllerRevision", namespace=namespace, labels=narrowed
            )
    eligible = {name: eligible_nodes(ds, nodes) for name, ds in live.items() if ds and nodes is not None}
    return state_readiness(live, pods=pods, revisions=revisions, eligible=eligible)
