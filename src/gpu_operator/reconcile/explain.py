"""Why is this GPU node not ready? A pure explanation from objects anyone can read through the API.

For each GPU node: the readiness chain (driver, toolkit, validation, device plugin, feature discovery,
exporter), each step judged from the operand pod on that node (init containers first: a validator
waiting in Init is the usual "stuck" shape), the first step that is not done and why, allocatable
GPUs, the driver version label, the upgrade state and the MIG config state. ``gpu-operator status``
prints it; ``-o json`` gives the same data to machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

JSON = dict[str, Any]

#: (step, operand DaemonSet app label) in the order a node becomes ready.
CHAIN = (
    ("driver", "nvidia-driver-daemonset"),
    ("toolkit", "nvidia-container-toolkit-daemonset"),
    ("validation", "nvidia-operator-validator"),
    ("device-plugin", "nvidia-device-plugin-daemonset"),
    ("feature-discovery", "gpu-feature-discovery"),
    ("exporter", "nvidia-dcgm-exporter"),
)


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    done: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class NodeReport:
    node: str
    ready: bool
    blocking: str  # the first step not done, with why; "" when ready
    steps: tuple[Step, ...]
    allocatable: Mapping[str, str] = field(default_factory=dict)
    product: str = ""
    driver: str = ""
    upgrade_state: str = ""
    mig_config: str = ""
    mig_state: str = ""

    def as_json(self) -> JSON:
        return asdict(self)


def _container_problem(status: Mapping[str, Any], *, init: bool) -> str | None:
    state = status.get("state") or {}
    name = status.get("name", "?")
    if "waiting" in state:
        waiting = state["waiting"]
        why = waiting.get("message") or waiting.get("reason") or "waiting"
        return f"{'init container' if init else 'container'} {name} waiting: {why}"
    if "terminated" in state and ((init and state["terminated"].get("exitCode") != 0) or not init):
        term = state["terminated"]
        return f"container {name} exited {term.get('exitCode')}: {term.get('message') or term.get('reason', '')}"
    if "running" in state and init:
        return f"init container {name} is still running (waiting for its prerequisite)"
    if not init and not status.get("ready"):
        return f"container {name} is not ready"
    return None


def pod_problem(pod: Mapping[str, Any] | None) -> str | None:
    """Why a pod is not serving yet, or None when it is Running and Ready."""
    if pod is None:
        return "no pod on this node (is the node labelled for this operand?)"
    status = pod.get("status") or {}
    for init in status.get("initContainerStatuses") or []:
        problem = _container_problem(init, init=True)
        if problem:
            return problem
    if status.get("phase") != "Running":
        return f"pod {pod['metadata']['name']} is {status.get('phase', 'Pending')}"
    for container in status.get("containerStatuses") or []:
        problem = _container_problem(container, init=False)
        if problem:
            return problem
    return None


def explain_node(node: Mapping[str, Any], *, pods: Sequence[Mapping[str, Any]]) -> NodeReport:
    """The report for one node from its Node object and the operand pods bound to it."""
    meta = node["metadata"]
    labels: Mapping[str, str] = meta.get("labels") or {}
    by_app = {(p["metadata"].get("labels") or {}).get("app"): p for p in pods}
    steps = []
    for name, app in CHAIN:
        deploy = labels.get(f"nvidia.com/gpu.deploy.{_deploy_key(name)}")
        if deploy in ("false", "pre-installed") or "paused" in (deploy or ""):
            # An opt-out or a host driver is not a problem; a pause is (it should end by itself).
            paused = "paused" in (deploy or "")
            steps.append(Step(name=name, done=not paused, detail=f"nvidia.com/gpu.deploy label is {deploy!r}"))
            continue
        problem = pod_problem(by_app.get(app))
        steps.append(Step(name=name, done=problem is None, detail=problem or "ready"))
    blocking = next((f"{s.name}: {s.detail}" for s in steps if not s.done), "")
    allocatable = {k: v for k, v in ((node.get("status") or {}).get("allocatable") or {}).items() if "nvidia.com" in k}
    return NodeReport(
        node=meta["name"],
        ready=not blocking,
        blocking=blocking,
        steps=tuple(steps),
        allocatable=allocatable,
        product=labels.get("nvidia.com/gpu.product", ""),
        driver=labels.get("nvidia.com/cuda.driver-version.full", ""),
        upgrade_state=labels.get("nvidia.com/gpu-driver-upgrade-state", ""),
        mig_config=labels.get("nvidia.com/mig.config", ""),
        mig_state=labels.get("nvidia.com/mig.config.state", ""),
    )


def _deploy_key(step: str) -> str:
    return {
        "toolkit": "container-toolkit",
        "validation": "operator-validator",
        "feature-discovery": "gpu-feature-discovery",
        "exporter": "dcgm-exporter",
    }.get(step, step)
