"""Builders for upgrade-planner tests: nodes, pods and driver pods in a line each."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gpu_operator.names.pods import PodView
from gpu_operator.names.selectors import parse_selector
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Budget, DriverPodView, Knobs, NodeView, Snapshot
from gpu_operator.upgrade.plan import Plan, plan
from gpu_operator.upgrade.preview import merge_patch
from gpu_operator.upgrade.steps import Step

NOW = 1_000_000.0


def driver(
    *, sync: bool = False, ready: bool = True, running: bool = True, same_config: bool = False, **kw: object
) -> DriverPodView:
    fields: dict[str, object] = {
        "namespace": "gpu-operator",
        "name": "nvidia-driver-x",
        "daemonset": "nvidia-driver-daemonset",
        "in_sync": sync,
        "ready": ready,
        "running": running,
        "same_config": same_config,
        "version": "570.1" if not sync else "580.2",
        "target_version": "580.2",
        "created": NOW - 3600,
    }
    fields.update(kw)
    return DriverPodView(**fields)  # type: ignore[arg-type]


def pod(name: str, *, gpu: bool = True, owner: str = "ReplicaSet", ns: str = "work", **kw: object) -> PodView:
    return PodView(namespace=ns, name=name, gpu=gpu, owner_kind=owner, **kw)  # type: ignore[arg-type]


def node(
    name: str,
    state: str = m.UNKNOWN,
    *,
    drv: DriverPodView | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pods: Sequence[PodView] = (),
    validators: Sequence[PodView] = (),
    sync: bool = False,
) -> NodeView:
    all_labels = dict(labels or {})
    if state:
        all_labels[m.STATE_LABEL] = state
    return NodeView(
        name=name,
        labels=all_labels,
        annotations={m.UPGRADE_ENABLED: "true", **(annotations or {})},
        unschedulable=unschedulable,
        ready=ready,
        driver=drv if drv is not None else driver(sync=sync, name=f"driver-{name}"),
        pods=tuple(pods),
        validators=tuple(validators),
    )


def knobs(**kw: object) -> Knobs:
    values: dict[str, object] = {"auto_upgrade": True, "max_parallel": 1, "max_unavailable": "100%"}
    values.update(kw)
    for key in ("wait_selector", "drain_selector"):
        if isinstance(values.get(key), str):
            values[key] = parse_selector(str(values[key]), field=key)
    return Knobs(**values)  # type: ignore[arg-type]


def run(nodes: Sequence[NodeView], k: Knobs, *, budgets: Sequence[Budget] = (), now: float = NOW) -> Plan:
    return plan(Snapshot(nodes=tuple(nodes), budgets=tuple(budgets), now=now), k)


def after(p: Plan, name: str, default: str = "") -> str:
    step = p.step(name)
    return step.after if step else default


def applied(n: NodeView, step: Step | None) -> NodeView:
    """The node as the cluster would show it after the executor applied ``step`` (pods evicted go)."""
    if step is None:
        return n

    drv = n.driver
    if step.delete_driver and drv is not None:
        drv = dataclasses.replace(drv, terminating=True)
    return dataclasses.replace(
        n,
        labels=merge_patch(n.labels, step.labels),
        annotations=merge_patch(n.annotations, step.annotations),
        unschedulable=n.unschedulable if step.unschedulable is None else step.unschedulable,
        pods=tuple(p for p in n.pods if p.key not in step.evict),
        driver=drv,
    )
