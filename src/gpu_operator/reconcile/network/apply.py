"""Converging one owner's rendered states onto the cluster: apply what differs, prune what no state wants.

The network operator's objects carry upstream's keys: the state label
(``nvidia.network-operator.state``) and the revision hash (``nvidia.network-operator.revision``). An
object whose live revision equals the rendered one is not written again, so an idle pass is reads
only. Owned objects are those labelled with a state and owner-referenced by the owner (the
NicClusterPolicy or a NicNodePolicy); a state whose section was removed renders nothing, so its
objects are pruned here, and while they are being deleted the state reads notReady (``observe``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_operator.kube.api import JSON, Kube, applied_hash, with_applied_hash
from gpu_operator.names import network as net
from gpu_operator.render.meta import with_owner
from gpu_operator.render.network import NetState

#: Every kind a network state renders: (apiVersion, kind, namespaced). Listing these finds leftovers.
PRUNE_KINDS = (
    ("apps/v1", "DaemonSet", True),
    ("apps/v1", "Deployment", True),
    ("v1", "ConfigMap", True),
    ("v1", "ServiceAccount", True),
    ("v1", "Service", True),
    ("rbac.authorization.k8s.io/v1", "Role", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
)
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def key_of(obj: JSON) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass(frozen=True, kw_only=True)
class Converged:
    """What :func:`converge` did, and every owned object as it is now, by state name."""

    applied: int = 0
    pruned: int = 0
    live: dict[str, dict[tuple[str, str], JSON]] = field(default_factory=dict)  # state -> (kind, name) -> object


async def owned_objects(kube: Kube, *, owner: JSON, namespace: str) -> dict[Key, JSON]:
    """Every object labelled with a network state and owned by ``owner`` (one list per kind)."""
    uid = owner["metadata"]["uid"]
    owned: dict[Key, JSON] = {}
    for api_version, kind, namespaced in PRUNE_KINDS:
        live = await kube.list_objects(
            api_version, kind, namespace=namespace if namespaced else None, labels={net.STATE_LABEL: None}
        )
        for obj in live:
            if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                full = {"apiVersion": api_version, "kind": kind, **obj}
                owned[key_of(full)] = full
    return owned


def _state_of(obj: JSON) -> str:
    return str((obj["metadata"].get("labels") or {}).get(net.STATE_LABEL, ""))


async def converge(kube: Kube, *, states: Sequence[NetState], owner: JSON, namespace: str) -> Converged:
    """Apply every enabled state's objects whose revision differs; delete owned objects nothing renders."""
    owned = await owned_objects(kube, owner=owner, namespace=namespace)
    applied = pruned = 0
    wanted: set[Key] = set()
    live: dict[str, dict[tuple[str, str], JSON]] = {state.name: {} for state in states}
    for state in states:
        if not state.enabled or state.error:
            continue  # an error state keeps what it had; a disabled one is pruned below
        for obj in state.objects:
            key = key_of(obj)
            wanted.add(key)
            desired = with_applied_hash(with_owner(obj, owner=owner), key=net.REVISION_ANNOTATION)
            current = owned.get(key)
            if current is not None and applied_hash(current, key=net.REVISION_ANNOTATION) == applied_hash(
                desired, key=net.REVISION_ANNOTATION
            ):
                live[state.name][(key[1], key[3])] = current
                continue
            result = await kube.apply(desired)
            live[state.name][(key[1], key[3])] = {"apiVersion": key[0], "kind": key[1], **result}
            applied += 1
    errored = {s.name for s in states if s.enabled and s.error}
    for key, obj in owned.items():
        name = _state_of(obj)
        if key in wanted or name in errored:
            if name in errored:
                live.setdefault(name, {})[(key[1], key[3])] = obj
            continue
        await kube.delete(key[0], key[1], key[3], namespace=key[2] or None)
        pruned += 1
        # Still there until the API server finishes deleting it: the state reads notReady meanwhile.
        live.setdefault(name, {})[(key[1], key[3])] = obj
    return Converged(applied=applied, pruned=pruned, live=live)
