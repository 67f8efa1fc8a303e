"""Installs (and removes) the project's CRDs on a cluster and waits until the API server agrees.

Installing is server-side apply, then waiting until each CRD is Established; removing is a delete, then
waiting until each is gone. Used by the demo, the integration tests and the Helm charts' hook Jobs
(``gpu-operator crds apply|delete [--operator network]``: Helm never upgrades ``crds/``, so the
pre-upgrade hook applies the CRDs of the new version, and with ``cleanupCRD`` the pre-delete hook
removes them). The manifests come from the models (:mod:`gpu_operator.api.crdsets`: one set per
operator), so what is installed is what the models declare. A set's *shared* CRDs (the
NetworkAttachmentDefinition CRD, which Multus installs too) are applied only where absent or applied
by us alone, never force-applied over another installer's, and never deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import CascadeType

from gpu_operator.api.crd import crds
from gpu_operator.api.crdsets import GPU, crd_set
from gpu_operator.kube.api import (
    ClusterPolicyResource,
    HostDeviceNetworkResource,
    IPoIBNetworkResource,
    MacvlanNetworkResource,
    NicClusterPolicyResource,
    NicNodePolicyResource,
    NVIDIADriverResource,
)

FIELD_MANAGER = "gpu-operator"
NOT_FOUND = 404
CONFLICT = 409
APPLIED = "applied"
#: CRD -> the kind of its objects, deleted before the CRD (see :func:`delete_crds`). Every deletable CRD
#: of every set (``api.crdsets``) has one; a unit test holds them to it.
OBJECTS: dict[str, Any] = {
    "clusterpolicies.nvidia.com": ClusterPolicyResource,
    "nvidiadrivers.nvidia.com": NVIDIADriverResource,
    "nicclusterpolicies.mellanox.com": NicClusterPolicyResource,
    "nicnodepolicies.mellanox.com": NicNodePolicyResource,
    "macvlannetworks.mellanox.com": MacvlanNetworkResource,
    "hostdevicenetworks.mellanox.com": HostDeviceNetworkResource,
    "ipoibnetworks.mellanox.com": IPoIBNetworkResource,
}


class CRDNotEstablishedError(RuntimeError):
    """A CRD was applied but the API server did not report it Established in time."""


class CRDNotDeletedError(RuntimeError):
    """A CRD was deleted but the API server still had it when the time was up."""


def _established(crd: CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status and crd.status.conditions else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_crds(
    *, client: Client, timeout: float = 60.0, manifests: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """Apply every CRD (server-side, field manager ``gpu-operator``) and wait until each is Established.

    Returns the CRD names. Raises :class:`CRDNotEstablishedError` naming the CRDs still pending.
    """
    return list(apply_crds(client=client, timeout=timeout, manifests=manifests or crds()))


def apply_crds(
    *, client: Client, timeout: float, manifests: dict[str, dict[str, Any]], shared: Collection[str] = ()
) -> dict[str, str]:
    """Apply the CRDs and wait until each (kept ones too) is Established: CRD name -> what was done.

    The set's own CRDs are force-applied: the project owns them, and a field another manager took
    must not make the upgrade fail. A ``shared`` CRD is applied only where it is absent or every
    manager of it is ours, and never with force (see :func:`_apply_shared`): :data:`APPLIED`, or why it
    was kept. Raises :class:`CRDNotEstablishedError` naming the CRDs still pending.
    """
    done: dict[str, str] = {}
    for body in manifests.values():
        name = str(body["metadata"]["name"])
        obj: CustomResourceDefinition = CustomResourceDefinition.from_dict(body)  # type: ignore[assignment]
        if name in shared:
            done[name] = _apply_shared(client, obj, name=name)
            continue
        client.apply(obj, field_manager=FIELD_MANAGER, force=True)
        done[name] = APPLIED
    names = list(done)
    _wait_until_none(
        names,
        still=lambda n: not _established(client.get(CustomResourceDefinition, n)),
        deadline=time.monotonic() + timeout,
        error=lambda left: CRDNotEstablishedError(f"CRDs not Established after {timeout:.0f} s: {', '.join(left)}"),
    )
    return done


def _apply_shared(client: Client, obj: CustomResourceDefinition, *, name: str) -> str:
    """Apply a CRD that other software installs too, unless another installer has it.

    Why so careful: Multus (its manifests, other charts) installs the NetworkAttachmentDefinition CRD
    as well, possibly a newer or extended schema; force-applying ours would take its fields and could
    narrow the schema every NAD in the cluster is validated against. So the CRD is applied only where
    it is absent or every field manager of it is ours, and never with force: where an installer came
    between the read and the apply with a different schema, the apply is a conflict (409), which keeps
    theirs. A CRD that Helm
    created from a chart's ``crds/`` (ours or another's: the field manager is "helm" either way) is
    kept too -- the safe side; the reference schema has not changed.
    """
    try:
        live = client.get(CustomResourceDefinition, name)
    except ApiError as error:
        if error.status.code != NOT_FOUND:
            raise
    else:
        others = foreign_managers(live)
        if others:
            return f"managed by {', '.join(others)}"
    try:
        client.apply(obj, field_manager=FIELD_MANAGER, force=False)
    except ApiError as error:
        if error.status.code != CONFLICT:
            raise
        return "another installer applied it first"
    return APPLIED


def foreign_managers(crd: CustomResourceDefinition) -> list[str]:
    """The field managers of ``crd`` other than ours, sorted; the status (written by the API server) is
    nobody's. A CRD that records no manager at all counts as someone else's: it cannot be shown ours."""
    entries = [e for e in (crd.metadata.managedFields if crd.metadata else None) or [] if e.subresource != "status"]
    if not entries:
        return ["(unknown)"]
    return sorted({str(e.manager) for e in entries if e.manager != FIELD_MANAGER})


def _wait_until_none(
    names: list[str], *, still: Callable[[str], bool], deadline: float, error: Callable[[list[str]], Exception]
) -> None:
    """Poll until ``still`` holds for none of ``names``; past ``deadline``, raise ``error(those left)``."""
    pending = list(names)
    while pending := [n for n in pending if still(n)]:
        if time.monotonic() > deadline:
            raise error(pending)
        time.sleep(0.2)


def crd_names(manifests: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The names of the project's CRDs (``clusterpolicies.nvidia.com``, ...), in manifest order."""
    return [str(body["metadata"]["name"]) for body in (manifests or crds()).values()]


def delete_crds(*, client: Client, names: list[str] | None = None, timeout: float = 120.0) -> list[str]:
    """Delete the project's objects, then its CRDs, and wait until the API server has removed them.

    The objects of each CRD (:data:`OBJECTS`: the ClusterPolicies and NVIDIADrivers; the
    NicClusterPolicies, NicNodePolicies and networks) go first, in the foreground, while their CRDs
    still exist: the garbage collector deletes their operands (DaemonSets, a network's
    NetworkAttachmentDefinitions; they carry ``blockOwnerDeletion``) before the objects go.
    Deleting a CRD first would delete its objects without that -- the collector can no longer resolve
    the owners' kind, so their DaemonSets, roles and bindings would stay behind. Waiting makes the caller
    (Helm's pre-delete hook) return only once all is gone, while the operator still runs. A CRD already
    gone counts as deleted. Returns the CRD names deleted; raises :class:`CRDNotDeletedError` naming
    what is still present when the time is up.
    """
    pending = list(crd_names() if names is None else names)  # an empty list deletes nothing, not the GPU set
    deadline = time.monotonic() + timeout
    for name in pending:
        kind = OBJECTS.get(name)
        if kind is not None:
            _delete_objects(client, kind=kind, crd=name, deadline=deadline, timeout=timeout)
    deleted = []
    for name in pending:
        try:
            client.delete(CustomResourceDefinition, name)
        except ApiError as error:
            if error.status.code != NOT_FOUND:
                raise
            continue
        deleted.append(name)
    _wait_until_none(
        pending,
        still=lambda n: _present(client, n),
        deadline=deadline,
        error=lambda left: CRDNotDeletedError(f"CRDs still present after {timeout:.0f} s: {', '.join(left)}"),
    )
    return deleted


def _delete_objects(client: Client, *, kind: Any, crd: str, deadline: float, timeout: float) -> None:
    """Delete every object of ``kind`` in the foreground and wait until none is left."""
    try:
        objects = [str(o.metadata.name) for o in client.list(kind)]
    except ApiError as error:
        if error.status.code == NOT_FOUND:  # the CRD is not installed: nothing of its kind exists
            return
        raise
    for name in objects:
        try:
            client.delete(kind, name, cascade=CascadeType.FOREGROUND)
        except ApiError as error:
            if error.status.code != NOT_FOUND:
                raise
    while left := [str(o.metadata.name) for o in client.list(kind)]:
        if time.monotonic() > deadline:
            raise CRDNotDeletedError(f"{crd} objects still present after {timeout:.0f} s: {', '.join(left)}")
        time.sleep(0.2)


def _present(client: Client, name: str) -> bool:
    try:
        client.get(CustomResourceDefinition, name)
    except ApiError as error:
        if error.status.code == NOT_FOUND:
            return False
        raise
    return True


def run_crd_action(*, client: Client, action: str, timeout: float, operator: str = GPU) -> list[str]:
    """``gpu-operator crds apply|delete [--operator OPERATOR]``: act on that operator's CRD set (the GPU
    operator's by default), return one line per CRD for the log."""
    if action not in ("apply", "delete"):
        raise ValueError(f"unknown action {action!r}: expected apply or delete")
    crds_of = crd_set(operator)
    if action == "apply":
        done = apply_crds(client=client, timeout=timeout, manifests=dict(crds_of.manifests), shared=crds_of.shared)
        return [f"applied {n} (Established)" if why == APPLIED else f"kept {n}: {why}" for n, why in done.items()]
    names = list(crds_of.deletable())
    deleted = delete_crds(client=client, names=names, timeout=timeout)
    lines = [f"deleted {name}" if name in deleted else f"absent {name}" for name in names]
    # A shared CRD is never deleted: deleting the NAD CRD would delete every NAD in the cluster.
    return lines + [f"kept {name}, shared with other installers: never deleted" for name in sorted(crds_of.shared)]
