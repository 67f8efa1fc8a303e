"""Reading the cluster into a remediation :class:`~gpu_operator.remediation.model.Snapshot` (reads only).

The signals are the device plugin's ``GpuUnhealthy`` Events on Nodes (``agents.deviceplugin.healthreport``:
"<GPU> unhealthy after XID <n>..."), recorded in the namespace where Node Events live; the controller's
own breaker and dry-run Events there say what it already reported. Nodes come from the operator's
cache; pods are listed only for the nodes the plan may drain (in remediation, or with a recent XID),
one field-selected list each.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpu_operator.agents.deviceplugin.healthreport import UNHEALTHY_REASON
from gpu_operator.api.clusterpolicy import ClusterPolicySpec, schedule_of
from gpu_operator.api.defaults import auto_upgrade_enabled
from gpu_operator.api.remediation import DEFAULT_ACTION
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.names.pods import pod_view
from gpu_operator.remediation import model as m
from gpu_operator.remediation.model import NodeView, Note, Settings, Signal
from gpu_operator.render.facts import NFD_GPU_LABELS

EVENT_NAMESPACE = "default"  # where the device plugin (kube.nodecluster) records Node Events
EVENT_FIELDS = "involvedObject.kind=Node"
#: The Event reasons the controller reads: the device plugin's signal and its own notes.
REASONS = (UNHEALTHY_REASON, m.BREAKER_REASON, m.DRY_RUN_REASON)
_XID = re.compile(r"\bafter XID (\d+)\b")
_GPU_NODE_LABELS = (*NFD_GPU_LABELS, keys.GPU_DISCOVERED, keys.GPU_PRESENT)
_READ_ANNOTATIONS = (*keys.REMEDIATION_ANNOTATIONS, keys.REMEDIATION_HANDLED, keys.UPGRADE_REQUESTED)


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(labels.get(k) == "true" for k in _GPU_NODE_LABELS)


def settings_of(spec: ClusterPolicySpec, *, gpu_nodes: int, now: float) -> Settings:
    """``spec.remediation`` and the maintenance windows, resolved at ``now``."""
    r = spec.remediation
    schedule = schedule_of(spec)
    is_open = schedule is None or schedule.is_open(now)
    return Settings(
        enabled=r.enabled, dry_run=r.dry_run, limit=r.node_limit(gpu_nodes=gpu_nodes),
        quiet_seconds=float(r.quiet_seconds), table=r.table(), default_action=DEFAULT_ACTION,
        auto_upgrade=auto_upgrade_enabled(spec), window_open=is_open,
        window_wait="" if is_open or schedule is None else schedule.wait_reason(now),
        window_opens=None if is_open or schedule is None else schedule.next_open(now),
    )  # fmt: skip


def _event_time(event: Mapping[str, Any]) -> float | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        at = m.parse_stamp(event.get(key))
        if at is not None:
            return at
    return m.parse_stamp((event.get("metadata") or {}).get("creationTimestamp"))


def signals_and_notes(events: Iterable[Mapping[str, Any]]) -> tuple[tuple[Signal, ...], tuple[Note, ...]]:
    """The XID signals and the controller's own notes among Node Events."""
    signals, notes = [], []
    for event in events:
        node = str((event.get("involvedObject") or {}).get("name") or "")
        reason, at = event.get("reason"), _event_time(event)
        if not node or at is None:
            continue
        if reason == UNHEALTHY_REASON and (match := _XID.search(str(event.get("message") or ""))):
            signals.append(Signal(node=node, xid=int(match.group(1)), at=at))
        elif reason in (m.BREAKER_REASON, m.DRY_RUN_REASON):
            notes.append(Note(node=node, reason=str(reason), at=at))
    return tuple(signals), tuple(notes)


def slim_event(event: JSON) -> JSON:
    """What the controller reads of an Event (its informer keeps only this)."""
    keep = ("reason", "message", "lastTimestamp", "eventTime", "firstTimestamp", "involvedObject")
    meta = event.get("metadata") or {}
    picked = {k: event[k] for k in keep if k in event}
    picked["involvedObject"] = {"kind": (event.get("involvedObject") or {}).get("kind"),
                                "name": (event.get("involvedObject") or {}).get("name")}  # fmt: skip
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "creationTimestamp") if k in meta}, **picked}


def node_view(node: Mapping[str, Any], pods: Sequence[JSON] = (), *, pods_known: bool = True) -> NodeView:
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return NodeView(
        name=str(meta.get("name", "")),
        annotations={k: str(annotations[k]) for k in _READ_ANNOTATIONS if k in annotations},
        taints=tuple(dict(t) for t in (node.get("spec") or {}).get("taints") or []),
        boot_id=str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")),
        upgrade_state=str((meta.get("labels") or {}).get(keys.UPGRADE_STATE, "")),
        pods=tuple(pod_view(p) for p in pods),
        pods_known=pods_known,
    )


def candidates(
    nodes: Sequence[Mapping[str, Any]],
    signals: Sequence[Signal],
    *,
    since: float,
    acts: Callable[[int], bool],
    entering: int,
) -> set[str]:
    """Nodes whose pods the plan may evict: those in remediation, and the first ``entering`` by name (the
    order the planner admits them in) with an XID newer than ``since`` and than the node's watermark that
    leads to an action. The breaker lets no more in during one pass, so during a storm over a thousand
    nodes a pass lists the pods of a few, not of every node with an XID."""
    out: set[str] = set()
    watermarks: dict[str, float] = {}
    for node in nodes:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        name = str(node["metadata"]["name"])
        if annotations.get(keys.REMEDIATION_STATE):
            out.add(name)
        else:
            watermarks[name] = max(since, m.parse_stamp(annotations.get(keys.REMEDIATION_HANDLED)) or since)
    fresh = sorted({s.node for s in signals if s.node in watermarks and s.at > watermarks[s.node] and acts(s.xid)})
    return out | set(fresh[: max(entering, 0)])


#: Pod lists of one pass at a time: a pass never floods the API server, whatever the cluster's size.
PARALLEL_LISTS = 8


async def read_nodes(
    kube: Kube,
    *,
    signals: Sequence[Signal],
    quiet_seconds: float,
    now: float,
    acts: Callable[[int], bool] = lambda xid: True,
    limit: Callable[[int], int] = lambda gpu_nodes: gpu_nodes,
) -> tuple[tuple[NodeView, ...], int]:
    """The GPU nodes (with pods for the candidates: ``pods_known``) and their count. ``acts`` says whether
    an XID leads to an action; ``limit`` is the breaker's limit for a number of GPU nodes."""
    nodes = [n for n in await kube.list_objects("v1", "Node") if is_gpu_node(n)]
    wanted = candidates(nodes, signals, since=now - quiet_seconds, acts=acts, entering=limit(len(nodes)))
    gate = asyncio.Semaphore(PARALLEL_LISTS)

    async def pods(name: str) -> list[JSON]:
        async with gate:
            return await kube.list_objects("v1", "Pod", fields={"spec.nodeName": name})

    order = sorted(wanted)
    listed = dict(zip(order, await asyncio.gather(*(pods(name) for name in order)), strict=True))
    views = []
    for node in nodes:
        name = str(node["metadata"]["name"])
        views.append(node_view(node, listed.get(name, ()), pods_known=name in listed))
    return tuple(views), len(nodes)
