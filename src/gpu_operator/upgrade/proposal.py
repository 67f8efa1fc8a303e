"""What a proposed ClusterPolicy would do to the driver pods of the live cluster (for ``upgrade plan``).

The proposed policy is rendered exactly as the operator would render it (same facts, same operator
settings, read from the operator Deployment when there is one), and each driver DaemonSet is sent to
the API server as a server-side-apply **dry run**: the server answers with the object it would store,
defaults included, so comparing its pod template with the live one says precisely whether a new
revision (and so an upgrade of every pod) would follow. Nothing is written. The result is the
snapshot and knobs the pure preview runs on, plus notes about what the preview cannot roll (a
DaemonSet that would be replaced under a new name deletes its pods at once). The OFED driver's
counterpart (a proposed NicClusterPolicy or NicNodePolicy) is ``upgrade.ofed_proposal``; both share the
dry run and the measurements here.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.api.clusterpolicy import ClusterPolicy, schedule_of
from gpu_operator.api.defaults import is_enabled
from gpu_operator.kube.api import JSON, Kube, strip
from gpu_operator.kube.facts import gather_facts
from gpu_operator.kube.typed import ApiError, codecs
from gpu_operator.names.images import driver_version
from gpu_operator.render import OperatorSettings, render
from gpu_operator.render.meta import with_owner
from gpu_operator.upgrade.collect import CLUSTER_POLICY, DRIVER_SELECTOR, Cluster, read_cluster, startup, template_env
from gpu_operator.upgrade.controller import knobs_for, snapshot_of
from gpu_operator.upgrade.model import DriverPodView, Knobs, Snapshot, knobs_from

DEFAULT_INSTALL_SECONDS = 300.0  # when no driver pod has become ready yet to measure


@dataclass(kw_only=True)
class Proposal:
    snapshot: Snapshot
    knobs: Knobs
    install_seconds: float
    measured: bool  # install_seconds comes from the live driver pods
    validation_seconds: float = 0.0  # the validator's start to Ready, measured on its live pods
    notes: list[str] = field(default_factory=list)


async def _settings(kube: Kube, *, namespace: str) -> OperatorSettings:
    deployments = await kube.list_objects("apps/v1", "Deployment", namespace=namespace, labels={"app": "gpu-operator"})
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"].get("containers") or []:
            env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e}
            return OperatorSettings.from_env(env)
    return OperatorSettings()


async def _proposed_templates(
    kube: Kube, *, policy: ClusterPolicy, live_policy: JSON | None, namespace: str, notes: list[str]
) -> dict[str, JSON]:
    """Driver DaemonSet name -> the pod template the API server would store for it."""
    nodes = await kube.list_objects("v1", "Node")
    precompiled = bool(policy.spec.driver.use_precompiled)
    facts = await gather_facts(kube, nodes=nodes, namespace=namespace, precompiled=precompiled)
    states = render(policy, facts, operator=await _settings(kube, namespace=namespace))
    owner = live_policy or {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "preview"}}
    out = {}
    for state in states:
        for obj in state.objects if state.enabled else ():
            if obj["kind"] != "DaemonSet":
                continue
            labels = (obj["spec"]["template"].get("metadata") or {}).get("labels") or {}
            if not all(labels.get(k) == v for k, v in DRIVER_SELECTOR.items()):
                continue
            template = await dry_run_template(kube, obj, owner=owner, notes=notes)
            if template is not None:
                out[obj["metadata"]["name"]] = template
    return out


async def dry_run_template(kube: Kube, obj: JSON, *, owner: JSON, notes: list[str]) -> JSON | None:
    """The pod template the API server would store for DaemonSet ``obj`` (a server-side-apply dry run);
    None, with a note, when the server refuses it."""
    body = with_owner(obj, owner=owner) if "uid" in owner["metadata"] else obj
    try:
        stored = await kube.client.apply(codecs.from_dict(body), field_manager=kube.field_manager, force=True,
                                         dry_run=True)  # fmt: skip
    except ApiError as error:
        notes.append(f"DaemonSet {obj['metadata']['name']}: the API server refused it: {error.status.message}")
        return None
    template: JSON = strip(stored)["spec"]["template"]
    return template


def propose(driver: DriverPodView, *, live: JSON, proposed: JSON, version: Any = driver_version) -> DriverPodView:
    """The driver pod as it would be under the ``proposed`` template: out of date when it differs from ``live``."""
    if live == proposed:
        return driver
    digest = template_env(proposed, "DRIVER_CONFIG_DIGEST")
    same = bool(digest) and digest == driver.digest  # a restart would not need a reinstall
    return dataclasses.replace(
        driver,
        in_sync=False,
        same_config=same,
        target_version=version(proposed) or driver.version,
    )


def _validation_seconds(cluster: Cluster) -> float:
    measured = [s for pods in cluster.node_validators.values() for p in pods if (s := startup(p.get("status") or {}))]
    return statistics.median(measured) if measured else 0.0


def install_seconds(cluster: Cluster) -> tuple[float, bool]:
    """The median time from a driver pod's start to Ready on the cluster (measured), or the default."""
    measured = [d.startup_seconds for _, d in cluster.drivers.values() if d.startup_seconds is not None]
    return (statistics.median(measured), True) if measured else (DEFAULT_INSTALL_SECONDS, False)


async def build_proposal(kube: Kube, *, namespace: str, policy_doc: dict[str, Any] | None) -> Proposal:
    """The live cluster's ClusterPolicy partition, as it would be under ``policy_doc`` (None: as it is)."""
    cluster = await read_cluster(kube, namespace=namespace, every_pod=True)
    notes: list[str] = []
    install, measured = install_seconds(cluster)
    validation = _validation_seconds(cluster)
    if policy_doc is None:
        knobs = (await knobs_for(kube, max_driver_restarts=10))[0].get(CLUSTER_POLICY, Knobs())
        if isinstance(knobs, str):
            raise ValueError(knobs)
        snapshot = snapshot_of(cluster, partition=CLUSTER_POLICY, now=0.0)
        return Proposal(snapshot=snapshot, knobs=knobs, install_seconds=install, measured=measured,
                        validation_seconds=validation, notes=notes)  # fmt: skip
    policy = ClusterPolicy.model_validate(policy_doc)
    sandbox = is_enabled(policy.spec, section="sandboxWorkloads")
    knobs = knobs_from(policy.spec.driver.upgrade_policy, sandbox=sandbox, windows=schedule_of(policy.spec))
    live_policies = await kube.list_objects("nvidia.com/v1", "ClusterPolicy")
    live_policy = next((p for p in live_policies if p["metadata"]["name"] == policy.metadata.name), None)
    templates = await _proposed_templates(
        kube, policy=policy, live_policy=live_policy, namespace=namespace, notes=notes
    )
    live_sets = {
        d["metadata"]["name"]: d
        for d in await kube.list_objects("apps/v1", "DaemonSet", namespace=namespace, labels=DRIVER_SELECTOR)
    }
    for name in sorted(set(live_sets) - set(templates)):
        if not (live_sets[name]["metadata"].get("labels") or {}).get("nvidia.com/gpu-operator.driver"):
            notes.append(f"DaemonSet {name} would be removed: its driver pods are deleted at once, not rolled")
    for node, (partition, driver) in list(cluster.drivers.items()):
        if partition != CLUSTER_POLICY or driver.daemonset not in templates:
            continue
        live = live_sets[driver.daemonset]["spec"]["template"]
        cluster.drivers[node] = (partition, propose(driver, live=live, proposed=templates[driver.daemonset]))
    snapshot = snapshot_of(cluster, partition=CLUSTER_POLICY, now=0.0)
    for view in snapshot.nodes:
        if view.driver and view.driver.waiting_reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            notes.append(f"{view.name}: the driver image cannot be pulled now ({view.driver.waiting_reason})")
    if not knobs.auto_upgrade:
        notes.append("driver.upgradePolicy.autoUpgrade is off: the operator will not roll the change")
    return Proposal(
        snapshot=snapshot, knobs=knobs, install_seconds=install, measured=measured, validation_seconds=validation,
        notes=notes,
    )  # fmt: skip
