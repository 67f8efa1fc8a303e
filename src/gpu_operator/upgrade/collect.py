"""Snapshots from the cluster: the I/O half of ``snapshot -> plan -> execute``.

One pass reads the driver DaemonSets, their ControllerRevisions and pods (one list each, by the
driver label) and the Nodes (in the operator, all from its informers); the PodDisruptionBudgets and
the pods on a node only while some node is between cordon and driver restart (never every pod of a
large cluster), and validator pods only for nodes waiting on validation or failed (a failed node recovers
once its validator passes). The driver pods are split
into partitions: the ClusterPolicy's DaemonSets, and one per NVIDIADriver (pod label
``nvidia.com/gpu-operator.driver``), each planned with its own policy. Which pods are the driver's and
which keys its nodes carry is the :class:`~gpu_operator.upgrade.drivers.DriverSource`'s business: the
GPU driver by default, or the Network Operator's OFED driver (NicClusterPolicy and NicNodePolicy
partitions). The conversion functions (``pod_view``, ``driver_view``, ``node_view``) are pure and also
serve the tests and the preview.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.names.images import driver_version
from gpu_operator.names.keys import UpgradeKeys
from gpu_operator.names.objects import is_ready
from gpu_operator.names.pods import pod_view
from gpu_operator.names.selectors import from_label_selector
from gpu_operator.upgrade import drivers
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.drivers import (
    GPU_DRIVER_SELECTOR,
    GPU_SOURCE,
    GPU_VALIDATOR_SELECTOR,
    DriverSource,
)
from gpu_operator.upgrade.model import Budget, DriverPodView, NodeView

CLUSTER_POLICY = drivers.CLUSTER_POLICY  # the partition key of the ClusterPolicy's driver
DRIVER_SELECTOR = GPU_DRIVER_SELECTOR
DRIVER_CR_LABEL = keys.DRIVER_CR
OWNER_LABEL = keys.DRIVER_OWNER
VALIDATOR_SELECTOR = GPU_VALIDATOR_SELECTOR
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
#: States whose planning needs the pods on the node (eviction, drain, jobs).
PODS_NEEDED = frozenset({m.CORDON, m.WAIT_FOR_JOBS, m.POD_DELETION, m.DRAIN})
VALIDATORS_NEEDED = frozenset({m.POD_RESTART, m.VALIDATION, m.FAILED})
ALL = "*"  # every namespace (lightkube lists the default namespace when given none)


def api_seconds(stamp: str | None) -> float:
    """An API timestamp (``2025-01-31T12:00:00Z``) in seconds since the epoch; 0 for none."""
    if not stamp:
        return 0.0
    # fromisoformat is C (strptime was most of a pass's time at 100 nodes); it reads the Z as UTC.
    parsed = dt.datetime.fromisoformat(stamp)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


def _controller(obj: JSON) -> JSON | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def _ready(status: JSON) -> bool:
    return is_ready({"status": status})


def template_env(template: JSON, name: str) -> str:
    """The literal value of env var ``name`` in a pod (template)'s containers; "" when absent."""
    for c in (template.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == name and "value" in e:
                return str(e["value"])
    return ""


def startup(status: JSON) -> float | None:
    """Seconds from a pod's start to Ready (None while not Ready)."""
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if not ready or ready.get("status") != "True" or not status.get("startTime"):
        return None
    return max(api_seconds(ready.get("lastTransitionTime")) - api_seconds(status["startTime"]), 0.0)


def _not_ready_restarts(status: JSON) -> tuple[int, str]:
    restarts, reason = 0, ""
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not c.get("ready"):
            restarts = max(restarts, int(c.get("restartCount", 0)))
            reason = reason or str(((c.get("state") or {}).get("waiting") or {}).get("reason", ""))
    return restarts, reason


def template_target(daemonset: JSON | None, *, version: Any = driver_version) -> tuple[str, str]:
    """The config digest and driver version a driver DaemonSet's pod template asks for ("" when none)."""
    template = (daemonset or {}).get("spec", {}).get("template") or {}
    return template_env(template, "DRIVER_CONFIG_DIGEST"), version(template)


def driver_view(
    pod: JSON,
    *,
    daemonset: JSON | None,
    newest_hash: str | None,
    version: Any = driver_version,
    target: tuple[str, str] | None = None,
) -> DriverPodView:
    """``target``: :func:`template_target` of ``daemonset``, when the caller has it (one per DaemonSet)."""
    meta, status = pod["metadata"], pod.get("status") or {}
    restarts, reason = _not_ready_restarts(status)
    target_digest, target_version = target if target is not None else template_target(daemonset, version=version)
    digest = template_env(pod, "DRIVER_CONFIG_DIGEST")
    return DriverPodView(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        daemonset=(daemonset or {}).get("metadata", {}).get("name", ""),
        in_sync=daemonset is not None and (meta.get("labels") or {}).get("controller-revision-hash") == newest_hash,
        same_config=bool(digest) and digest == target_digest,
        running=status.get("phase") == "Running",
        ready=_ready(status),
        terminating=bool(meta.get("deletionTimestamp")),
        restarts=restarts,
        waiting_reason=reason,
        created=api_seconds(meta.get("creationTimestamp")),
        version=version(pod),
        target_version=target_version,
        digest=digest,
        startup_seconds=startup(status),
        spec_digest=_stamp(daemonset) or "",
    )


def node_view(
    node: JSON,
    *,
    driver: DriverPodView | None,
    pods: Sequence[JSON] | None = None,
    validators: Sequence[JSON] | None = None,
    keys: UpgradeKeys = m.GPU,
) -> NodeView:
    meta, status = node["metadata"], node.get("status") or {}
    return NodeView(
        name=meta["name"],
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        ready=_ready(status),
        driver=driver,
        pods=tuple(pod_view(p) for p in pods or ()),
        validators=tuple(pod_view(v) for v in validators or ()),
        pods_known=pods is not None,
        validators_known=validators is not None,
        keys=keys,
    )


def newest_revisions(revisions: Sequence[JSON]) -> dict[str, str]:
    """DaemonSet uid -> the controller-revision-hash of its newest ControllerRevision."""
    best: dict[str, tuple[int, str]] = {}
    for rev in revisions:
        owner = _controller(rev)
        digest = (rev["metadata"].get("labels") or {}).get("controller-revision-hash", "")
        if owner and digest and int(rev.get("revision", 0)) >= best.get(owner["uid"], (-1, ""))[0]:
            best[owner["uid"]] = (int(rev.get("revision", 0)), digest)
    return {uid: digest for uid, (_, digest) in best.items()}


#: The last pass's driver pod views by ``id`` of the pod: (the pod, what else the view was made of, the
#: view). An informer's cached pod is replaced, never modified, when it changes, so the same pod object
#: with equal inputs has the same view (making them was a third of an upgrade pass at 100 nodes); holding
#: the pods keeps their ids from being reused. Swapped whole, so concurrent passes only ever miss.
_views: list[dict[int, tuple[JSON, tuple[Any, ...], DriverPodView]]] = [{}]


@dataclass
class Cluster:
    """What one pass read, before it is split per partition."""

    nodes: dict[str, JSON]
    drivers: dict[str, tuple[str, DriverPodView]]  # node -> (partition, driver pod)
    budgets: tuple[Budget, ...] = ()
    node_pods: dict[str, list[JSON]] = field(default_factory=dict)
    node_validators: dict[str, list[JSON]] = field(default_factory=dict)
    source: DriverSource = GPU_SOURCE
    #: Driver DaemonSets whose controller has not observed their latest spec: their newest revision,
    #: and so which pods are in sync, is not known yet.
    settling: tuple[str, ...] = ()

    def partition_of(self, node: str) -> str:
        if node in self.drivers:
            return self.drivers[node][0]
        return self.source.node_partition(self.nodes[node])

    def views(self, partition: str) -> tuple[NodeView, ...]:
        out = []
        for name, node in sorted(self.nodes.items()):
            labelled = self.source.keys.state in (node["metadata"].get("labels") or {})
            if (name in self.drivers or labelled) and self.partition_of(name) == partition:
                driver = self.drivers.get(name, ("", None))[1]
                pods, validators = self.node_pods.get(name), self.node_validators.get(name)
                out.append(node_view(node, driver=driver, pods=pods, validators=validators, keys=self.source.keys))
        return tuple(out)


async def read_cluster(
    kube: Kube, *, namespace: str, every_pod: bool = False, source: DriverSource = GPU_SOURCE
) -> Cluster:
    """One pass's view of ``source``'s driver; ``every_pod`` reads all pods at once (the preview needs
    every node's pods)."""
    # Independent reads go out together: a pass costs one round trip, not six, on a busy API server.
    sets, revisions, pods, node_list = await asyncio.gather(
        kube.list_objects("apps/v1", "DaemonSet", namespace=namespace, labels=source.selector),
        kube.list_objects("apps/v1", "ControllerRevision", namespace=namespace, labels=source.selector),
        kube.list_objects("v1", "Pod", namespace=namespace, labels=source.selector),
        kube.list_objects("v1", "Node"),
    )
    nodes = {n["metadata"]["name"]: n for n in node_list}
    label = source.keys.state
    states = {name: (node["metadata"].get("labels") or {}).get(label, "") for name, node in nodes.items()}
    busy = sorted(name for name, state in states.items() if state in PODS_NEEDED)
    # Budgets matter only to evictions, so only a pass with a node about to evict reads them.
    pdbs = await kube.list_objects("policy/v1", "PodDisruptionBudget", namespace=ALL) if busy or every_pod else []
    by_uid = {d["metadata"]["uid"]: d for d in sets}
    newest = newest_revisions(revisions)
    drivers: dict[str, tuple[str, DriverPodView]] = {}
    known, fresh = _views[0], {}
    targets = {uid: template_target(ds, version=source.version) for uid, ds in by_uid.items()}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in nodes:
            continue  # not scheduled yet: nothing to upgrade there
        owner = _controller(pod)
        ds = by_uid.get(owner["uid"]) if owner and owner.get("kind") == "DaemonSet" else None
        newest_hash = newest.get(ds["metadata"]["uid"]) if ds else None
        target = targets[ds["metadata"]["uid"]] if ds else None
        inputs = (ds["metadata"]["name"] if ds else None, newest_hash, target, source.version, _stamp(ds))
        entry = known.get(id(pod))
        if entry is None or entry[0] is not pod or entry[1] != inputs:
            view = driver_view(pod, daemonset=ds, newest_hash=newest_hash, version=source.version, target=target)
            entry = (pod, inputs, view)
        fresh[id(pod)] = entry
        view = entry[2]
        previous = drivers.get(node)
        if previous is None or view.created >= previous[1].created:  # the newest pod of a node wins
            drivers[node] = (source.pod_partition(pod, ds), view)
    _views[0] = fresh
    budgets = tuple(
        Budget(
            namespace=b["metadata"].get("namespace", ""),
            name=b["metadata"]["name"],
            selector=from_label_selector((b.get("spec") or {}).get("selector")),
            disruptions_allowed=int((b.get("status") or {}).get("disruptionsAllowed", 0)),
        )
        for b in pdbs
    )
    cluster = Cluster(nodes=nodes, drivers=drivers, budgets=budgets, source=source,
                      settling=tuple(sorted(d["metadata"]["name"] for d in sets if _settling(d))))  # fmt: skip
    validator = source.validators
    if every_pod:
        cluster.node_pods = {name: [] for name in nodes}
        cluster.node_validators = {name: [] for name in nodes}
        for pod in await kube.list_objects("v1", "Pod", namespace=ALL):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name in cluster.node_pods:
                cluster.node_pods[node_name].append(pod)
                labels = pod["metadata"].get("labels") or {}
                if (
                    validator is not None
                    and pod["metadata"].get("namespace") == namespace
                    and all(labels.get(k) == v for k, v in validator.items())
                ):
                    cluster.node_validators[node_name].append(pod)
        return cluster
    listed = await asyncio.gather(
        *(kube.list_objects("v1", "Pod", namespace=ALL, fields={"spec.nodeName": name}) for name in busy)
    )
    cluster.node_pods.update(zip(busy, listed, strict=True))
    validating = [name for name, state in states.items() if state in VALIDATORS_NEEDED]
    if validating and validator is not None:  # one list for all of them: the validator runs one pod per GPU node
        cluster.node_validators = {name: [] for name in validating}
        for pod in await kube.list_objects("v1", "Pod", namespace=namespace, labels=validator):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name in cluster.node_validators:
                cluster.node_validators[node_name].append(pod)
    return cluster


def _stamp(daemonset: JSON | None) -> str | None:
    """The spec.driver digest a driver DaemonSet says it was rendered from (canary rollouts)."""
    return (daemonset["metadata"].get("annotations") or {}).get(keys.DRIVER_SPEC_DIGEST) if daemonset else None


def _settling(daemonset: JSON) -> bool:
    """The DaemonSet controller has reported on an older spec than this one (no report yet: no pods yet)."""
    observed = (daemonset.get("status") or {}).get("observedGeneration")
    return observed is not None and int(observed) < int(daemonset["metadata"].get("generation") or 0)


def partitions(cluster: Cluster) -> list[str]:
    label = cluster.source.keys.state
    found = {cluster.partition_of(n) for n in cluster.nodes if n in cluster.drivers}
    found |= {cluster.partition_of(n) for n, o in cluster.nodes.items() if label in _labels(o)}
    return sorted(found)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}
