"""The NVIDIADriver reconciler: route GPU nodes to driver configs, one driver DaemonSet per pool.

Active when no ClusterPolicy exists or the active one sets ``driver.useNvidiaDriverCRD`` (otherwise
every NVIDIADriver reports ``disabled``). One pass: render routing and pools (pure,
``render.nvidiadriver``), write the owner label on nodes whose owner changed (a node selected by two
drivers keeps its owner: fail closed, reported in both drivers' status), apply each driver's
DaemonSets with an owner reference to it, prune its DaemonSets for pools that are gone, and write each
driver's status from its pods' readiness (OnDelete: judged by revision hashes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pydantic import ValidationError

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import OWNER_LABEL, NVIDIADriver
from gpu_operator.api.validation import one_line
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.observe.readiness import Readiness
from gpu_operator.observe.status import driver_status
from gpu_operator.reconcile.daemonsets import readiness_of
from gpu_operator.render import ClusterFacts, OperatorSettings, RenderError, node_info
from gpu_operator.render.meta import with_owner
from gpu_operator.render.nvidiadriver import nvidiadriver_active, render_drivers

ND = ("nvidia.com/v1alpha1", "NVIDIADriver")
DRIVER_LABEL = keys.DRIVER_CR


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shared_owner_refs(obj: JSON, owners: Sequence[JSON]) -> JSON:
    """Objects every driver needs (service account, roles) are owned by all of them, none as controller,
    so they go only when the last driver goes."""
    refs = [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
        for o in owners
    ]
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": refs}}


async def _status(kube: Kube, doc: JSON, status: JSON) -> None:
    current = doc.get("status") or {}  # status.driverUpgrade belongs to the upgrade controller
    if {key: current.get(key) for key in status} != status:
        await kube.patch_status(*ND, doc["metadata"]["name"], status)


async def reconcile_drivers(
    kube: Kube,
    *,
    namespace: str,
    operator: OperatorSettings,
    policy: ClusterPolicy | None,
    nodes: Sequence[JSON],
    facts: ClusterFacts,
) -> int:
    """One pass over every NVIDIADriver; returns how many driver DaemonSets were applied."""
    docs = [d for d in await kube.list_objects(*ND) if not d["metadata"].get("deletionTimestamp")]
    if not docs:
        return 0
    by_name = {d["metadata"]["name"]: d for d in docs}
    active = nvidiadriver_active(policy)
    drivers: list[NVIDIADriver] = []
    for doc in docs:
        generation = int(doc["metadata"].get("generation", 1))
        previous = (doc.get("status") or {}).get("conditions") or []
        try:
            drivers.append(NVIDIADriver.model_validate(doc))
        except ValidationError as exc:
            message = one_line(exc)
            failed = driver_status(
                active=active, readiness=_failed(message), conflicts={}, generation=generation, now=_now(),
                previous=previous,
            )  # fmt: skip
            await _status(kube, doc, failed.as_status(namespace=namespace))
    if not active:
        for doc in docs:
            generation = int(doc["metadata"].get("generation", 1))
            status = driver_status(
                active=False, readiness=_failed(""), conflicts={}, generation=generation, now=_now(),
                previous=(doc.get("status") or {}).get("conditions") or [],
            )  # fmt: skip
            await _status(kube, doc, status.as_status(namespace=namespace))
        return 0
    try:
        result = render_drivers(drivers, [node_info(n) for n in nodes], policy=policy, facts=facts, operator=operator)
    except RenderError as exc:
        for doc in docs:
            status = driver_status(
                active=True, readiness=_failed(str(exc)), conflicts={},
                generation=int(doc["metadata"].get("generation", 1)), now=_now(),
                previous=(doc.get("status") or {}).get("conditions") or [],
            )  # fmt: skip
            await _status(kube, doc, status.as_status(namespace=namespace))
        return 0
    for node, owner in result.routing.label_changes.items():
        await kube.patch_labels("v1", "Node", node, {OWNER_LABEL: owner})
    for obj in result.shared:
        await kube.apply(_shared_owner_refs(obj, docs))
    applied = 0
    for manifests in result.drivers:
        doc = by_name[manifests.driver]
        wanted = set()
        for obj in manifests.objects:
            await kube.apply(with_owner(obj, owner=doc))
            wanted.add(obj["metadata"]["name"])
            applied += 1
        live = await kube.list_objects(
            "apps/v1", "DaemonSet", namespace=namespace, labels={DRIVER_LABEL: manifests.driver}
        )
        for old in live:
            owned = any(o.get("uid") == doc["metadata"]["uid"] for o in old["metadata"].get("ownerReferences") or [])
            if owned and old["metadata"]["name"] not in wanted:
                await kube.delete("apps/v1", "DaemonSet", old["metadata"]["name"], namespace=namespace)
        status = driver_status(
            active=True,
            readiness=await readiness_of(kube, names=manifests.daemonsets, namespace=namespace, nodes=nodes),
            conflicts=result.routing.conflicts_of(manifests.driver),
            missing=[m.message for m in manifests.missing],
            skipped_nodes=manifests.skipped_nodes,
            generation=int(doc["metadata"].get("generation", 1)),
            now=_now(),
            previous=(doc.get("status") or {}).get("conditions") or [],
        )
        await _status(kube, doc, status.as_status(namespace=namespace))
    return applied


def _failed(reason: str) -> Readiness:
    return Readiness(ready=False, reason=reason)
