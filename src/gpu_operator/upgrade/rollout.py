"""The cluster side of canary rollouts: the rollout ConfigMap, the gates' facts and the probe Jobs.

``upgrade.canary`` decides; this module reads what it decides on and applies what it decided. The
rollout of the ClusterPolicy's driver lives in the ConfigMap ``nvidia-driver-rollout`` of the
operator's namespace (written only here, by the upgrade controller; the reconciler reads it to render
the last good driver while rolling back; ``gpu-operator upgrade rollback`` only sets an annotation on
it). Gate facts are read only while a canary stage runs, and only about the canaries: their
GpuUnhealthy Events (the device plugin's, in ``default``), their validator and exporter pods, and
their probe Jobs. A probe Job is pinned to its canary by ``nodeName``, requests the GPUs the probe
names, and is deleted once the stage is over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_operator.api.clusterpolicy import active_policy
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.names.objects import is_ready
from gpu_operator.upgrade import canary as c
from gpu_operator.upgrade.canary import Decision, GateFacts, Rollout, Target
from gpu_operator.upgrade.collect import api_seconds
from gpu_operator.upgrade.model import Knobs, Snapshot

log = logging.getLogger(__name__)
CONFIGMAP = keys.DRIVER_ROLLOUT_CONFIGMAP
XID_REASON = "GpuUnhealthy"  # the device plugin's Node Event (agents.deviceplugin.healthreport)
NODE_EVENTS = "default"
EXPORTER_SELECTOR = {"app": "nvidia-dcgm-exporter"}
VALIDATOR_SELECTOR = {"app": "nvidia-operator-validator"}
PROBE_PHASES = (c.CANARY, c.SOAKING)
#: How often a pass looks again while a stage waits on something no watch reports (Jobs, Events, soak).
STAGE_RECHECK = 5.0


def target_of(policy: Mapping[str, Any]) -> Target:
    """The rollout target of a ClusterPolicy document: its spec.driver's digest, version and JSON."""
    driver = dict(((policy.get("spec") or {}).get("driver")) or {})
    body = {k: v for k, v in driver.items() if k != "upgradePolicy"}
    return Target(digest=c.driver_spec_digest(driver), version=str(driver.get("version") or ""),
                  driver=json.dumps(body, sort_keys=True))  # fmt: skip


async def read_rollout(kube: Kube, *, namespace: str) -> tuple[Rollout, JSON | None]:
    """The rollout as kept, and its ConfigMap (None before the first write)."""
    # Past the informer: its ConfigMaps are cached without their values.
    found = await kube.list_objects("v1", "ConfigMap", namespace=namespace, fields={"metadata.name": CONFIGMAP})
    if not found:
        return Rollout(), None
    cm = found[0]
    asked = (cm["metadata"].get("annotations") or {}).get(keys.DRIVER_ROLLBACK_REQUESTED) == "true"
    return Rollout.from_data(cm.get("data"), rollback_requested=asked), cm


async def write_rollout(kube: Kube, *, namespace: str, rollout: Rollout, current: JSON | None) -> None:
    """Write the rollout when it changed; a consumed rollback request is removed in the same write."""
    data = rollout.data()
    meta = (current or {}).get("metadata") or {}
    asked = (meta.get("annotations") or {}).get(keys.DRIVER_ROLLBACK_REQUESTED)
    # The phase is also a label: a label change wakes the policy reconciler (its cache drops the values),
    # which renders the last good driver while rolling back.
    labels = {keys.DRIVER_ROLLOUT_PHASE: rollout.phase or "idle"}
    same_labels = all((meta.get("labels") or {}).get(k) == v for k, v in labels.items())
    if current is not None and dict(current.get("data") or {}) == data and not asked and same_labels:
        return
    if current is None:
        await kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": CONFIGMAP, "namespace": namespace, "labels": labels},
                           "data": data})  # fmt: skip
        return
    body: JSON = {"data": data, "metadata": {"labels": labels}}
    if asked:
        body["metadata"]["annotations"] = {keys.DRIVER_ROLLBACK_REQUESTED: None}
    await kube.patch("v1", "ConfigMap", CONFIGMAP, body, namespace=namespace)


def _when(event: JSON) -> float:
    meta = event.get("metadata") or {}
    return api_seconds(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp"))


def _on_nodes(pods: Sequence[JSON], nodes: set[str]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in nodes and not pod["metadata"].get("deletionTimestamp"):
            out[node] = out.get(node, False) or is_ready(pod)
    return out


def probe_key(rollout: Rollout) -> str:
    """The probe Jobs' label value: the target and the soak's start. Jobs of an earlier soak of the same
    driver (kept an hour after they finish) are not this soak's: their result says nothing now."""
    return f"{rollout.target}-{int(rollout.since)}"


def probe_name(*, node: str, key: str) -> str:
    """A probe Job's name: readable, and unique per node however long and alike the node names are (a
    hash of the whole name; Job names are at most 63 characters)."""
    tag = hashlib.sha256(f"{key}/{node}".encode()).hexdigest()[:10]
    return f"nvidia-driver-probe-{node[:30].rstrip('-.')}-{tag}"


def _probe_state(job: JSON) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return c.PROBE_SUCCEEDED
        if cond.get("type") == "Failed":
            return f"failed: {cond.get('reason') or ''} {cond.get('message') or ''}".strip()
    return c.PROBE_RUNNING


async def gate_facts(kube: Kube, *, namespace: str, rollout: Rollout) -> GateFacts:
    """What the gates read about the canaries (nothing outside a canary stage)."""
    if rollout.phase not in PROBE_PHASES or not rollout.canaries:
        return GateFacts()
    nodes = set(rollout.canaries)
    events, validators, exporters, jobs = await asyncio.gather(
        kube.list_objects("v1", "Event", namespace=NODE_EVENTS, fields={"reason": XID_REASON}),
        kube.list_objects("v1", "Pod", namespace=namespace, labels=VALIDATOR_SELECTOR),
        kube.list_objects("v1", "Pod", namespace=namespace, labels=EXPORTER_SELECTOR),
        kube.list_objects("batch/v1", "Job", namespace=namespace, labels={keys.CANARY_PROBE_LABEL: probe_key(rollout)}),
    )
    xids: dict[str, str] = {}
    for event in sorted(events, key=_when):
        involved = event.get("involvedObject") or {}
        name, when = involved.get("name", ""), _when(event)
        # Only XIDs since the canary stage began: the old driver's faults say nothing of the new one.
        if involved.get("kind") == "Node" and name in nodes and name not in xids and when >= int(rollout.since):
            xids[name] = f"GpuUnhealthy: {event.get('message', '')}"
    probes = {}
    for job in jobs:
        node = (job["metadata"].get("annotations") or {}).get(keys.CANARY_PROBE_LABEL, "")
        if node in nodes:
            probes[node] = _probe_state(job)
    return GateFacts(xids=xids, validators=_on_nodes(validators, nodes), exporter=_on_nodes(exporters, nodes),
                     probes=probes)  # fmt: skip


def probe_job(*, node: str, probe: Mapping[str, Any], key: str, namespace: str) -> JSON:
    """The probe Job of one canary: pinned to the node, one try, killed after the probe's timeout."""
    container: JSON = {
        "name": "probe",
        "image": probe["image"],
        # The GPU comes through the device plugin and CDI: the probe needs no privilege of its own.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    for field in ("command", "args"):
        if probe.get(field):
            container[field] = list(probe[field])
    if probe.get("imagePullPolicy"):
        container["imagePullPolicy"] = probe["imagePullPolicy"]
    gpus = int(probe.get("gpus", 1))
    if gpus:
        container["resources"] = {"limits": {keys.GPU_RESOURCE: str(gpus)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": probe_name(node=node, key=key),
            "namespace": namespace,
            "labels": {keys.CANARY_PROBE_LABEL: key},
            "annotations": {keys.CANARY_PROBE_LABEL: node},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(probe.get("timeoutSeconds", 300)),
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {keys.CANARY_PROBE_LABEL: key}},
                "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [container]},
            },
        },
    }


async def apply_probes(kube: Kube, *, namespace: str, decision: Decision, probe: Mapping[str, Any] | None) -> None:
    """Create the probe Jobs the decision wants. Finished Jobs go by their TTL and a stage's stray ones by
    their deadline: deleting a Job through the API would orphan its pod."""
    if probe is None or not decision.probes:
        return
    key = probe_key(decision.rollout)
    listed = await kube.list_objects("batch/v1", "Job", namespace=namespace, labels={keys.CANARY_PROBE_LABEL: key})
    have = {j["metadata"]["name"] for j in listed}
    for node in decision.probes:
        job = probe_job(node=node, probe=probe, key=key, namespace=namespace)
        if job["metadata"]["name"] not in have:
            log.info("canary probe Job %s on %s", job["metadata"]["name"], node)
            await kube.create(job)


async def announce(kube: Kube, *, policy: JSON, events: Sequence[tuple[str, str, bool]]) -> None:
    for reason, message, warning in events:
        (log.warning if warning else log.info)("driver rollout: %s: %s", reason, message)
        await kube.event(involved=policy, reason=reason, message=message, warning=warning, namespace=NODE_EVENTS)


async def canary_stage(
    kube: Kube, *, namespace: str, snapshot: Snapshot, knobs: Knobs
) -> tuple[Knobs, Decision | None]:
    """Advance the ClusterPolicy driver's rollout one step: the knobs with the nodes the stage admits,
    and the decision (None without an active ClusterPolicy)."""
    policy = active_policy(await kube.list_objects("nvidia.com/v1", "ClusterPolicy"))
    if policy is None:
        return knobs, None
    rollout, current = await read_rollout(kube, namespace=namespace)
    facts = await gate_facts(kube, namespace=namespace, rollout=rollout)
    decision = c.advance(rollout, snapshot=snapshot, knobs=knobs.canary, target=target_of(policy), facts=facts)
    await write_rollout(kube, namespace=namespace, rollout=decision.rollout, current=current)
    await announce(kube, policy=policy, events=decision.events)
    await apply_probes(kube, namespace=namespace, decision=decision, probe=knobs.canary.probe if knobs.canary else None)
    if decision.rollout.phase in (*PROBE_PHASES, c.ROLLING_BACK) and decision.wake_in is None:
        decision = dataclasses.replace(decision, wake_in=STAGE_RECHECK)
    return dataclasses.replace(knobs, admit=decision.allowed, admit_hold=decision.hold), decision


def status_of(decision: Decision | None) -> dict[str, Any] | None:
    """``status.driverUpgrade.canary`` (None when no canary stage was ever set up)."""
    if decision is None:
        return None
    r = decision.rollout
    if not r.phase and not r.canaries:
        return None
    body = {"phase": r.phase, "nodes": list(r.canaries), "targetVersion": r.target_version,
            "goodVersion": r.good_version, "reason": r.reason or decision.hold}  # fmt: skip
    return {k: v for k, v in body.items() if v}
