"""The driver-upgrade controller: one pass reads the cluster, plans every partition and executes.

Partitions are the ClusterPolicy's driver and each NVIDIADriver (``collect``), each planned with its
own ``upgradePolicy`` (resolved by ``knobs_for``); both paths share :func:`plan` and
:func:`execute`. With ``driver="ofed"`` the same pass upgrades the Network Operator's OFED driver:
its partitions are the NicClusterPolicy and each NicNodePolicy (``upgrade.ofed``), its nodes carry
``nvidia.com/ofed-driver-upgrade-*`` keys, and no status is written (upstream's NicClusterPolicy has
no upgrade status). The controller keeps nothing in memory between passes: a restarted operator
continues from the labels and annotations on the Nodes. ``upgrade_pass`` returns the counts per state
(for status and metrics) and when to look again: soon while a node is between cordon and uncordon
(pods leaving a node raise no event the operator watches), otherwise when something changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from gpu_operator.api.clusterpolicy import ClusterPolicy, active_policy, schedule_of
from gpu_operator.api.defaults import is_enabled
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.api.windows import WindowSchedule
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.kube.typed import ApiError
from gpu_operator.names import network
from gpu_operator.names.selectors import SelectorError
from gpu_operator.upgrade import canary
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.collect import CLUSTER_POLICY, Cluster, partitions, read_cluster
from gpu_operator.upgrade.drivers import GPU_DRIVER, source_for
from gpu_operator.upgrade.execute import Applied, execute
from gpu_operator.upgrade.model import Knobs, Snapshot, knobs_from
from gpu_operator.upgrade.ofed import node_partition, policy_knobs
from gpu_operator.upgrade.plan import Plan, plan
from gpu_operator.upgrade.rollout import canary_stage, status_of
from gpu_operator.upgrade.status import StatusOwner, summary, write_status

log = logging.getLogger(__name__)
VALIDATOR_DAEMONSET = "nvidia-operator-validator"
ACTIVE_REQUEUE = 1.0  # seconds between passes while a node is mid-upgrade
WINDOW_RECHECK = 300.0  # at most this long asleep while nodes wait for a maintenance window
FAILED_REQUEUE = 30.0  # failed nodes are re-checked for recovery


@dataclass(frozen=True, kw_only=True)
class PartitionResult:
    partition: str  # "" for the ClusterPolicy (NicClusterPolicy), else the NVIDIADriver's (NicNodePolicy's) name
    knobs: Knobs
    counts: Mapping[str, int]
    plan: Plan | None = None
    applied: Applied = field(default_factory=Applied)
    error: str = ""
    held: str = ""  # why nothing was planned this pass although the policy allows upgrades
    wake_in: float | None = None  # seconds until a maintenance window opens for nodes waiting for one
    canary_phase: str | None = None  # the rollout's canary phase ("" idle; None: no rollout kept)


@dataclass(frozen=True, kw_only=True)
class UpgradeOutcome:
    partitions: tuple[PartitionResult, ...] = ()

    def metric_lines(self) -> list[str]:
        """``gpu_operator_driver_rollout_phase{phase}``: 1 for the phase the ClusterPolicy driver's rollout
        is in (``idle`` between rollouts), 0 for the others; nothing before a rollout is kept."""
        phase = next((p.canary_phase for p in self.partitions if p.canary_phase is not None), None)
        if phase is None:
            return []
        lines = ["# HELP gpu_operator_driver_rollout_phase The phase of the driver rollout (canary rollouts).",
                 "# TYPE gpu_operator_driver_rollout_phase gauge"]  # fmt: skip
        for name in canary.PHASES:
            lines.append(f'gpu_operator_driver_rollout_phase{{phase="{name or "idle"}"}} {int(name == phase)}')
        return lines

    @property
    def requeue_after(self) -> float | None:
        states = Counter[str]()
        for part in self.partitions:
            if part.knobs.auto_upgrade:
                states.update(part.counts)
        if any(n for s, n in states.items() if s not in m.IDLE_STATES and s != m.FAILED):
            return ACTIVE_REQUEUE
        if any(part.held for part in self.partitions):
            return ACTIVE_REQUEUE
        waits = [min(max(p.wake_in, ACTIVE_REQUEUE), WINDOW_RECHECK) for p in self.partitions if p.wake_in is not None]
        if states.get(m.FAILED):
            waits.append(FAILED_REQUEUE)
        return min(waits) if waits else None


def applied_behind(doc: JSON) -> bool:
    """Whether the policy's status says the operator last applied an older generation of its spec.

    Until the reconciler has applied the new spec, the driver DaemonSets still carry the old one: a pod
    of the old template looks up to date, and a node mid-upgrade would be finished on the old driver
    and then upgraded a second time. A policy with no Ready condition yet has nothing to compare.
    """
    conditions = (doc.get("status") or {}).get("conditions") or []
    seen = [c.get("observedGeneration") for c in conditions if c.get("type") == "Ready"]
    generation = int(doc["metadata"].get("generation") or 0)
    return bool(seen) and seen[0] is not None and int(seen[0]) < generation


async def knobs_for(kube: Kube, *, max_driver_restarts: int) -> tuple[dict[str, Knobs | str], dict[str, StatusOwner]]:
    """Partition -> its knobs (or why its policy cannot be used), and partition -> its status owner."""
    out: dict[str, Knobs | str] = {}
    owners: dict[str, StatusOwner] = {}
    policy = active_policy(await kube.list_objects("nvidia.com/v1", "ClusterPolicy"))
    out[CLUSTER_POLICY] = Knobs(auto_upgrade=False)
    windows: WindowSchedule | None = None  # the ClusterPolicy's windows hold every driver's rollout
    if policy is not None:
        owners[CLUSTER_POLICY] = _owner(policy)
        try:
            spec = ClusterPolicy.model_validate(policy).spec
            sandbox = is_enabled(spec, section="sandboxWorkloads")
            windows = schedule_of(spec)
            out[CLUSTER_POLICY] = knobs_from(
                spec.driver.upgrade_policy, sandbox=sandbox, max_driver_restarts=max_driver_restarts, windows=windows
            )
        except (ValidationError, SelectorError) as error:
            out[CLUSTER_POLICY] = f"ClusterPolicy driver.upgradePolicy or maintenanceWindows: {error}"
    for doc in await kube.list_objects("nvidia.com/v1alpha1", "NVIDIADriver"):
        name = doc["metadata"]["name"]
        owners[name] = _owner(doc)
        try:
            cr = NVIDIADriver.model_validate(doc)
            out[name] = knobs_from(cr.spec.upgrade_policy, max_driver_restarts=max_driver_restarts, windows=windows)
        except (ValidationError, SelectorError) as error:
            out[name] = f"NVIDIADriver {name} upgradePolicy: {error}"
    return out, owners


def _held(owner: StatusOwner | None, *, partition: str, cluster: Cluster) -> str:
    """Why this pass must not plan ``partition`` ("" when it may): the driver DaemonSets are not yet
    what the policy asks for, so which driver pods are up to date cannot be told."""
    if owner is not None and owner.behind:
        return f"{partition or 'the ClusterPolicy'}: its latest spec is not applied to the driver DaemonSets yet"
    if cluster.settling:
        return f"the DaemonSet controller has not observed the latest spec of {', '.join(cluster.settling)}"
    return ""


def _owner(doc: JSON) -> StatusOwner:
    current = (doc.get("status") or {}).get("driverUpgrade")
    return StatusOwner(api_version=doc["apiVersion"], kind=doc["kind"], name=doc["metadata"]["name"], current=current,
                       behind=applied_behind(doc))  # fmt: skip


def snapshot_of(cluster: Cluster, *, partition: str, now: float) -> Snapshot:
    return Snapshot(nodes=cluster.views(partition), budgets=cluster.budgets, now=now, keys=cluster.source.keys)


async def _listed(kube: Kube, kind: str) -> list[JSON]:
    """The network kind's objects; none when its CRD is not installed (no Network Operator here)."""
    try:
        return await kube.list_objects(network.API_VERSION, kind)
    except ApiError as error:
        if error.status.code == 404:
            return []
        raise


async def ofed_knobs_for(
    kube: Kube, *, max_driver_restarts: int
) -> tuple[dict[str, Knobs | str], Callable[[JSON], str]]:
    """The OFED partitions' knobs, and the partition of a node whose OFED pod is gone (``upgrade.ofed``)."""
    cluster_policies, node_policies = await asyncio.gather(
        _listed(kube, network.NCP_KIND), _listed(kube, network.NNP_KIND)
    )
    settings = policy_knobs(
        cluster_policies=cluster_policies, node_policies=node_policies, max_driver_restarts=max_driver_restarts
    )
    return settings, node_partition(node_policies)


async def upgrade_pass(
    kube: Kube,
    *,
    namespace: str,
    max_driver_restarts: int = m.MAX_DRIVER_RESTARTS,
    now: float | None = None,
    driver: str = GPU_DRIVER,
) -> UpgradeOutcome:
    """One pass over every partition of ``driver`` ("gpu" or "ofed"; see the module docstring)."""
    source = source_for(driver)
    owners: dict[str, StatusOwner] = {}
    settings: Mapping[str, Knobs | str]
    if driver == GPU_DRIVER:
        (settings, owners), cluster, validator = await asyncio.gather(
            knobs_for(kube, max_driver_restarts=max_driver_restarts),
            read_cluster(kube, namespace=namespace),
            kube.get("apps/v1", "DaemonSet", VALIDATOR_DAEMONSET, namespace=namespace),
        )
        validation, listed = validator is not None, set(owners)
    else:
        (settings, owner_of), cluster = await asyncio.gather(
            ofed_knobs_for(kube, max_driver_restarts=max_driver_restarts),
            read_cluster(kube, namespace=namespace, source=source),
        )
        # A node between its old and new OFED pod follows the NicNodePolicy that selects it.
        cluster.source = dataclasses.replace(source, node_partition=owner_of)
        validation, listed = source.validators is not None, set(settings)
    moment = time.time() if now is None else now
    results = []
    for partition in sorted(set(partitions(cluster)) | listed):
        # A node whose NVIDIADriver is gone falls back to "upgrades off": its labels are cleaned up.
        knobs = settings.get(partition, Knobs(auto_upgrade=False))
        snapshot = snapshot_of(cluster, partition=partition, now=moment)
        counts = Counter(n.state or m.UNKNOWN for n in snapshot.nodes)
        if isinstance(knobs, str):
            log.error("driver upgrades paused: %s", knobs)
            results.append(PartitionResult(partition=partition, knobs=Knobs(), counts=counts, error=knobs))
            if partition in owners:
                paused = {"autoUpgrade": True, "nodes": {s: n for s, n in counts.items() if s}, "message": knobs}
                await write_status(kube, owner=owners[partition], desired=paused)
            continue
        if knobs.validation != validation:
            knobs = dataclasses.replace(knobs, validation=validation)
        held = _held(owners.get(partition), partition=partition, cluster=cluster) if knobs.auto_upgrade else ""
        if held:
            log.debug("driver upgrade pass held: %s", held)
            results.append(PartitionResult(partition=partition, knobs=knobs, counts=counts, held=held))
            continue
        decision = None
        if knobs.auto_upgrade and driver == GPU_DRIVER and partition == CLUSTER_POLICY:
            knobs, decision = await canary_stage(kube, namespace=namespace, snapshot=snapshot, knobs=knobs)
        planned = plan(snapshot, knobs)
        applied = await execute(kube, planned)
        after = Counter(counts)
        for step in planned.steps:
            after[step.before or m.UNKNOWN] -= 1
            after[step.after or m.UNKNOWN] += 1
        if not knobs.auto_upgrade:
            after = Counter[str]()
        wakes = [w for w in (None if planned.window_opens is None else planned.window_opens - moment,
                             decision.wake_in if decision else None) if w is not None]  # fmt: skip
        wake = min(wakes) if wakes else None
        phase = decision.rollout.phase if decision is not None else None
        results.append(PartitionResult(partition=partition, knobs=knobs, counts=+after, plan=planned, applied=applied,
                                       wake_in=wake, canary_phase=phase))  # fmt: skip
        if partition in owners:
            desired = summary(knobs=knobs, counts=+after, plan=planned, canary=status_of(decision))
            await write_status(kube, owner=owners[partition], desired=desired)
    return UpgradeOutcome(partitions=tuple(results))
