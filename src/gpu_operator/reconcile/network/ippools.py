"""nv-ipam IPPools: the network operator writes each pool's ``status.allocations`` (one block per node).

Part of the network pass (``reconcile.network.operator``), after the NicClusterPolicy and the
networks. The pools are read in the operator's namespace (where upstream's nv-ipam controller reads
them), the plan is pure (:func:`gpu_operator.render.network.ippools.plan_pool`) and a pool's status is
patched only when it differs.

One writer per status: this operator writes the pools' status unless the active NicClusterPolicy
deploys upstream's nv-ipam (``nvIpam`` set with an image that is not this operator's), whose own
controller then writes them. Without the ``ippools.nv-ipam.nvidia.com`` CRD there is nothing to do.
A pool that fails validation gets no blocks (its allocations are emptied) and a Warning Event naming
the fields; a pool too small for its nodes gets a Warning Event naming the nodes left without one.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from gpu_operator.api.network import ippool
from gpu_operator.api.network.imagespec import image_of
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.policy import facts_of
from gpu_operator.render.implementations import repository_of
from gpu_operator.render.network.ippools import PoolPlan, plan_pool

log = logging.getLogger(__name__)


def upstream_owns_pools(policy: JSON | None, *, agent_image: str) -> bool:
    """Whether upstream's nv-ipam controller (deployed by ``policy``) writes the pools' status."""
    if policy is None or not (policy.get("spec") or {}).get("nvIpam"):
        return False
    try:
        model = NicClusterPolicy.model_validate({"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, **policy})
    except ValidationError:
        return False  # an invalid policy deploys nothing, upstream's controller included
    spec = model.spec.nv_ipam
    if spec is None:
        return False
    try:
        return repository_of(image_of(spec, model.spec.global_)) != repository_of(agent_image)
    except ValueError:  # no image: nothing is deployed
        return False


def _errors(error: ValidationError) -> str:
    parts: list[str] = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "cross_field":
            parts.extend(f"{where}{r['field_path']}: {r['message']}" for r in e["ctx"]["rules"])
        else:
            parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


async def _event(kube: Kube, *, obj: JSON, reason: str, message: str) -> None:
    await kube.event(involved=obj, reason=reason, message=message[:1000], warning=True,
                     namespace=obj["metadata"]["namespace"])  # fmt: skip


async def reconcile_ippools(
    kube: Kube, *, namespace: str, agent_image: str, reported: dict[str, str] | None = None
) -> int:
    """Converge every IPPool's ``status.allocations`` in ``namespace``; returns how many were written.
    ``reported``: pool -> the problem last reported in an Event (the operator keeps it across passes),
    so a problem is reported when it appears or changes, not on every pass."""
    reported = {} if reported is None else reported
    if not await kube.crd_exists(ippool.CRD_NAME):
        return 0
    policy = await kube.get(net.API_VERSION, net.NCP_KIND, net.NCP_NAME)
    if upstream_owns_pools(policy, agent_image=agent_image):
        return 0
    nodes = facts_of(await kube.list_objects("v1", "Node"), namespace=namespace).nodes
    written = 0
    seen: set[str] = set()
    for raw in await kube.list_objects(ippool.API_VERSION, ippool.KIND, namespace=namespace):
        obj: JSON = {"apiVersion": ippool.API_VERSION, "kind": ippool.KIND, **raw}
        name = obj["metadata"]["name"]
        seen.add(name)
        problem = ""
        try:
            plan = plan_pool(pool=ippool.IPPool.model_validate(obj), nodes=nodes)
        except ValidationError as error:
            plan, problem = PoolPlan(pool=name), _errors(error)
        desired = plan.status()
        current: dict[str, Any] = obj.get("status") or {}
        if (current.get("allocations") or []) != desired["allocations"] or "allocations" not in current:
            await kube.patch_status(ippool.API_VERSION, ippool.KIND, name, desired, namespace=namespace)
            written += 1
            held = ", ".join(f"{a['nodeName']}={a['startIP']}-{a['endIP']}" for a in desired["allocations"])
            log.info("ippool %s/%s: %s", namespace, name, held or "no blocks")
        if problem:
            reason, message = "InvalidIPPool", f"IPPool {name} is invalid: {problem}"
        elif plan.unallocated:
            reason, message = (
                "IPPoolExhausted",
                f"IPPool {name} has no free block for node(s) {', '.join(plan.unallocated)}",
            )
        else:
            reason = message = ""
        if reported.get(name, "") != message:
            if message:
                await _event(kube, obj=obj, reason=reason, message=message)
            reported[name] = message
    for gone in set(reported) - seen:
        del reported[gone]
    return written
