"""MacvlanNetwork, HostDeviceNetwork and IPoIBNetwork: each becomes one NetworkAttachmentDefinition.

The NAD is rendered (``render.network.render_network``), owned by its network object (so deleting the
network deletes the NAD) and applied only when its revision changed. The network's status says
``ready`` with where the NAD is (upstream's ``<kind>NetworkAttachmentDef`` field), or ``error`` with
why: an invalid spec (the field named), or no NetworkAttachmentDefinition CRD in the cluster (the
chart installs it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.kube.api import JSON, Kube, applied_hash, with_applied_hash
from gpu_operator.names import network as net
from gpu_operator.render.meta import with_owner
from gpu_operator.render.network import render_network

log = logging.getLogger(__name__)
NAD_CRD = "network-attachment-definitions.k8s.cni.cncf.io"
MODELS: Mapping[str, Any] = {
    net.MACVLAN_KIND: MacvlanNetwork,
    net.HOSTDEVICE_KIND: HostDeviceNetwork,
    net.IPOIB_KIND: IPoIBNetwork,
}
#: Upstream's status field naming the NAD, one name per kind.
LINK_FIELD = {
    net.MACVLAN_KIND: "macvlanNetworkAttachmentDef",
    net.HOSTDEVICE_KIND: "hostDeviceNetworkAttachmentDef",
    net.IPOIB_KIND: "ipoibNetworkAttachmentDef",
}


def nad_link(nad: JSON) -> str:
    """Upstream's spelling of where the NAD is: ``<apiVersion>/namespaces/<ns>/<Kind>/<name>``."""
    meta = nad["metadata"]
    return f"{nad['apiVersion']}/namespaces/{meta.get('namespace', 'default')}/{nad['kind']}/{meta['name']}"


async def _status(kube: Kube, *, obj: JSON, state: str, reason: str = "", link: str = "") -> None:
    status = {"state": state, "reason": reason, LINK_FIELD[obj["kind"]]: link}
    current = obj.get("status") or {}
    if {k: current.get(k) for k in status} != status:
        await kube.patch_status(net.API_VERSION, obj["kind"], obj["metadata"]["name"], status)
        if current.get("state") != status["state"]:
            await kube.event(
                involved=obj, reason="Ready" if status["state"] == net.READY else "Error",
                message=reason or f"NetworkAttachmentDefinition {link}",
                warning=status["state"] != net.READY, namespace="default",
            )  # fmt: skip


async def reconcile_networks(kube: Kube) -> int:
    """Converge every network object's NAD; returns how many NADs were written."""
    written = 0
    crd: bool | None = None
    for kind, model in MODELS.items():
        for raw in await kube.list_objects(net.API_VERSION, kind):
            obj = {"apiVersion": net.API_VERSION, "kind": kind, **raw}
            try:
                nad = render_network(model.model_validate(obj))
            except ValidationError as error:
                why = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
                await _status(kube, obj=obj, state=net.ERROR, reason=why)
                continue
            if crd is None:
                crd = await kube.crd_exists(NAD_CRD)
            if not crd:
                why = f"the {NAD_CRD} CRD is not installed"
                await _status(kube, obj=obj, state=net.ERROR, reason=why)
                continue
            desired = with_applied_hash(with_owner(nad, owner=obj), key=net.REVISION_ANNOTATION)
            live = await kube.get(
                net.NAD_API_VERSION, net.NAD_KIND, nad["metadata"]["name"], namespace=nad["metadata"].get("namespace")
            )
            if live is None or applied_hash(live, key=net.REVISION_ANNOTATION) != applied_hash(
                desired, key=net.REVISION_ANNOTATION
            ):
                await kube.apply(desired)
                written += 1
            await _status(kube, obj=obj, state=net.READY, link=nad_link(nad))
    return written
