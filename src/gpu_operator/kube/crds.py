"""Installs (and removes) the project's CRDs on a cluster and waits until the API server agrees.

Installing is server-side apply, then waiting until each CRD is Established; removing is a delete, then
waiting until each is gone. Used by the demo, the integration tests and the Helm chart's hook Jobs
(``gpu-operator crds apply|delete``: Helm never upgrades ``crds/``, so the pre-upgrade hook applies the
CRDs of the new version, and with ``operator.cleanupCRD`` the pre-delete hook removes them). The
manifests come from :func:`gpu_operator.api.crd.crds`, so what is installed is what the models declare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import CascadeType

from gpu_operator.api.crd import crds
from gpu_operator.kube.api import ClusterPolicyResource, NVIDIADriverResource

FIELD_MANAGER = "gpu-operator"
NOT_FOUND = 404
#: CRD -> the kind of its objects, deleted before the CRD (see :func:`delete_crds`).
OBJECTS: dict[str, Any] = {
    "clusterpolicies.nvidia.com": ClusterPolicyResource,
    "nvidiadrivers.nvidia.com": NVIDIADriverResource,
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
    bodies = list((manifests or crds()).values())
    names = []
    for body in bodies:
        obj: CustomResourceDefinition = CustomResourceDefinition.from_dict(body)  # type: ignore[assignment]
        client.apply(obj, field_manager=FIELD_MANAGER, force=True)
        names.append(body["metadata"]["name"])
    _wait_until_none(
        names,
        still=lambda n: not _established(client.get(CustomResourceDefinition, n)),
        deadline=time.monotonic() + timeout,
        error=lambda left: CRDNotEstablishedError(f"CRDs not Established after {timeout:.0f} s: {', '.join(left)}"),
    )
    return names


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

    The ClusterPolicies and NVIDIADrivers go first, in the foreground, while their CRDs still exist: the
    garbage collector deletes their operands (they carry ``blockOwnerDeletion``) before the objects go.
    Deleting a CRD first would delete its objects without that -- the collector can no longer resolve
    the owners' kind, so their DaemonSets, roles and bindings would stay behind. Waiting makes the caller
    (Helm's pre-delete hook) return only once all is gone, while the operator still runs. A CRD already
    gone counts as deleted. Returns the CRD names deleted; raises :class:`CRDNotDeletedError` naming
    what is still present when the time is up.
    """
    pending = list(names or crd_names())
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


def run_crd_action(*, client: Client, action: str, timeout: float) -> list[str]:
    """``gpu-operator crds apply|delete``: act on the cluster, return one line per CRD for the log."""
    if action == "apply":
        return [f"applied {name} (Established)" for name in install_crds(client=client, timeout=timeout)]
    if action == "delete":
        names = crd_names()
        deleted = delete_crds(client=client, names=names, timeout=timeout)
        return [f"deleted {name}" if name in deleted else f"absent {name}" for name in names]
    raise ValueError(f"unknown action {action!r}: expected apply or delete")
