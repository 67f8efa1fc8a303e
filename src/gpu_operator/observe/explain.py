"""Why is this GPU node not ready? A pure explanation from objects anyone can read through the API.

For each GPU node: the readiness chain (driver, toolkit, validation, device plugin, feature discovery,
exporter), each step judged from the operand pod on that node (init containers first: a validator
waiting in Init is the usual "stuck" shape), the first step that is not done and why, allocatable
GPUs, the driver version label, the upgrade state and the MIG config state. ``gpu-operator status``
prints it; ``-o json`` gives the same data to machines.

A node in the middle of a driver upgrade (or whose upgrade failed) is cordoned by the upgrade
controller whatever its operand pods say, so the upgrade comes first: a ``driver-upgrade`` step
names the upgrade state, or the failure the controller recorded on the node. When the caller passes
Kubernetes Events, each step that is not done carries the latest Warning event that explains it: on
the step's operand pod, and for the upgrade step on the Node (the upgrade controller's
``GPUDriverUpgrade``, the driver manager's ``DriverManagerFailed``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.defaults import is_enabled
from gpu_operator.names import keys

JSON = dict[str, Any]
# The upgrade controller's keys (upstream's, see gpu_operator.upgrade.model): this layer may not import
# the upgrade package (import-linter's layer contract), so the names are repeated here.
UPGRADE_STATE_LABEL = keys.UPGRADE_STATE
UPGRADE_FAILURE_ANNOTATION = keys.UPGRADE_FAILURE
UPGRADE_FAILED = "upgrade-failed"
#: Upgrade states in which the node serves workloads as usual (not cordoned by the controller).
UPGRADE_IDLE = frozenset({"", "upgrade-done", "upgrade-required"})
UPGRADE_STEP = "driver-upgrade"

#: (step, operand DaemonSet app label) in the order a node becomes ready.
CHAIN = (
    ("driver", "nvidia-driver-daemonset"),
    ("toolkit", "nvidia-container-toolkit-daemonset"),
    ("validation", "nvidia-operator-validator"),
    ("device-plugin", "nvidia-device-plugin-daemonset"),
    ("feature-discovery", "gpu-feature-discovery"),
    ("exporter", "nvidia-dcgm-exporter"),
)

DRIVER_COMPONENT = "nvidia-driver"


def _chain_app(labels: Mapping[str, str]) -> str | None:
    """The chain's name for a pod: its ``app``, except that every driver DaemonSet (one per OS tag or
    kernel, or an NVIDIADriver pool) is the chain's one driver step."""
    if labels.get("app.kubernetes.io/component") == DRIVER_COMPONENT:
        return CHAIN[0][1]
    return labels.get("app")


#: The ClusterPolicy section that turns each step of the chain off (the validator cannot be).
STEP_SECTIONS = {
    "driver": "driver",
    "toolkit": "toolkit",
    "device-plugin": "devicePlugin",
    "feature-discovery": "gfd",
    "exporter": "dcgmExporter",
}


def disabled_steps(policy: Mapping[str, Any] | None) -> frozenset[str]:
    """The chain's steps the ClusterPolicy turns off (``driver.enabled=false``: the driver is on the
    host); none when there is no policy or it does not parse (the operator reports that itself)."""
    if policy is None:
        return frozenset()
    try:
        spec = ClusterPolicySpec.model_validate(policy.get("spec") or {})
    except ValidationError:
        return frozenset()
    return frozenset(step for step, section in STEP_SECTIONS.items() if not is_enabled(spec, section=section))


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    done: bool
    detail: str
    event: str = ""  # the latest Warning event that explains why the step is not done


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
    upgrade_failure: str = ""  # the controller's annotation on an upgrade-failed node
    mig_config: str = ""
    mig_state: str = ""

    def as_json(self) -> JSON:
        return asdict(self)


def _container_problem(status: Mapping[str, Any], *, init: bool, last_line: str = "") -> str | None:
    state = status.get("state") or {}
    name = status.get("name", "?")
    if "waiting" in state:
        waiting = state["waiting"]
        why = waiting.get("message") or waiting.get("reason") or "waiting"
        # A back-off says only that the container keeps failing; its last exit says why.
        last = (status.get("lastState") or {}).get("terminated") or {}
        if last:
            why += f" (last exit {last.get('exitCode')}: {last.get('message') or last.get('reason', '')})"
        return f"{'init container' if init else 'container'} {name} waiting: {why}"
    if "terminated" in state and ((init and state["terminated"].get("exitCode") != 0) or not init):
        term = state["terminated"]
        return f"container {name} exited {term.get('exitCode')}: {term.get('message') or term.get('reason', '')}"
    if "running" in state and init:
        if last_line:  # what the check waits on, in its own words (e.g. the driver library missing)
            return f"init container {name} is still running: {_strip_log_prefix(last_line)}"
        return f"init container {name} is still running (waiting for its prerequisite)"
    if not init and not status.get("ready"):
        return f"container {name} is not ready"
    return None


_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+Z? +\S+ +")


def _strip_log_prefix(line: str) -> str:
    """An agent's log line without its timestamp and logger name."""
    return _LOG_PREFIX.sub("", line.strip(), count=1)


def running_init_containers(pod: Mapping[str, Any]) -> list[str]:
    """The init containers of ``pod`` still running: whose last log line says what they wait on."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return [str(s.get("name")) for s in statuses if "running" in (s.get("state") or {})]


def pod_problem(
    pod: Mapping[str, Any] | None, *, last_lines: Mapping[tuple[str, str], str] | None = None
) -> str | None:
    """Why a pod is not serving yet, or None when it is Running and Ready. ``last_lines`` holds the last
    log line of running init containers, by (pod, container), when the caller could read them."""
    if pod is None:
        return "no pod on this node (is the node labelled for this operand?)"
    status = pod.get("status") or {}
    lines = last_lines or {}
    for init in status.get("initContainerStatuses") or []:
        line = lines.get((pod["metadata"]["name"], str(init.get("name"))), "")
        problem = _container_problem(init, init=True, last_line=line)
        if problem:
            return problem
    running = status.get("phase") == "Running"
    for container in status.get("containerStatuses") or []:
        problem = _container_problem(container, init=False)
        # Before Running only a waiting or exited container says more than the phase does.
        settled = {"waiting", "terminated"} & set(container.get("state") or {})
        if problem and (running or settled):
            return problem
    if not running:
        return f"pod {pod['metadata']['name']} is {status.get('phase', 'Pending')}"
    return None


def _stamp(event: Mapping[str, Any]) -> dt.datetime:
    """When an event last happened: core/v1 events set lastTimestamp, events.k8s.io ones eventTime or series."""
    candidates = (
        ((event.get("series") or {}).get("lastObservedTime")),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    )
    for value in candidates:
        if value:
            try:
                return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                continue
    return dt.datetime.min.replace(tzinfo=dt.UTC)


def latest_warning(events: Iterable[Mapping[str, Any]], *, kind: str, name: str) -> Mapping[str, Any] | None:
    """The newest Warning event about the object ``kind``/``name``, or None."""
    about = [
        e
        for e in events
        if e.get("type") == "Warning"
        and (e.get("involvedObject") or e.get("regarding") or {}).get("kind") == kind
        and (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name
    ]
    return max(about, key=_stamp, default=None)


def event_text(event: Mapping[str, Any] | None) -> str:
    """One line for an event: ``Warning REASON (xN, at TIME): MESSAGE``."""
    if event is None:
        return ""
    count = int(event.get("count") or (event.get("series") or {}).get("count") or 1)
    when = _stamp(event)
    times = f"x{count}, " if count > 1 else ""
    at = f"{times}at {when:%Y-%m-%dT%H:%M:%SZ}" if when.year > 1 else times.rstrip(", ")
    message = " ".join(str(event.get("message") or event.get("note") or "").split())
    return f"Warning {event.get('reason', '?')}{f' ({at})' if at else ''}: {message}"


def _upgrade_step(*, node: str, state: str, failure: str, events: Sequence[Mapping[str, Any]]) -> Step | None:
    """The ``driver-upgrade`` step of a node the upgrade controller holds (None when it holds none)."""
    if state in UPGRADE_IDLE:
        return None
    if state == UPGRADE_FAILED:
        detail = f"driver upgrade failed: {failure}" if failure else "driver upgrade failed"
    else:
        detail = f"driver upgrade: {state}"
    return Step(
        name=UPGRADE_STEP, done=False, detail=detail, event=event_text(latest_warning(events, kind="Node", name=node))
    )


def explain_node(
    node: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]] = (),
    last_lines: Mapping[tuple[str, str], str] | None = None,
    disabled: Iterable[str] = (),
) -> NodeReport:
    """The report for one node from its Node object, the operand pods bound to it and, optionally, events,
    the last log lines of running init containers (see :func:`pod_problem`) and the steps the policy
    turns off (:func:`disabled_steps`)."""
    meta = node["metadata"]
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    by_app = {_chain_app(p["metadata"].get("labels") or {}): p for p in pods}
    steps = []
    off = frozenset(disabled)
    for name, app in CHAIN:
        if name in off:
            where = " (the driver is on the host)" if name == "driver" else ""
            steps.append(Step(name=name, done=True, detail=f"disabled in the ClusterPolicy{where}"))
            continue
        deploy = labels.get(f"nvidia.com/gpu.deploy.{_deploy_key(name)}")
        if deploy in ("false", "pre-installed") or "paused" in (deploy or ""):
            # An opt-out or a host driver is not a problem; a pause is (it should end by itself).
            paused = "paused" in (deploy or "")
            steps.append(Step(name=name, done=not paused, detail=f"nvidia.com/gpu.deploy label is {deploy!r}"))
            continue
        pod = by_app.get(app)
        problem = pod_problem(pod, last_lines=last_lines)
        event = ""
        if problem is not None and pod is not None:
            event = event_text(latest_warning(events, kind="Pod", name=pod["metadata"]["name"]))
        steps.append(Step(name=name, done=problem is None, detail=problem or "ready", event=event))
    first = next((s for s in steps if not s.done), None)
    plugin = next((s for s in steps if s.name == "device-plugin"), None)
    # The validator's plugin check waits for GPUs the device plugin advertises: when the plugin is not
    # ready itself, it is the cause, not the validator waiting on it.
    waits_on_plugin = first is not None and first.name == "validation" and "plugin-validation" in first.detail
    if waits_on_plugin and plugin is not None and not plugin.done:
        first = plugin
    blocking = f"{first.name}: {first.detail}" if first is not None else ""
    state = labels.get(UPGRADE_STATE_LABEL, "")
    failure = annotations.get(UPGRADE_FAILURE_ANNOTATION, "") if state == UPGRADE_FAILED else ""
    upgrade = _upgrade_step(node=meta["name"], state=state, failure=failure, events=events)
    if upgrade is not None:
        # The controller keeps the node cordoned until the upgrade ends: that is what it waits on first;
        # the chain's own first problem (often the restarted driver) says what the upgrade waits on.
        blocking = upgrade.detail + (f" ({blocking})" if blocking else "")
        steps.insert(0, upgrade)
    allocatable = {k: v for k, v in ((node.get("status") or {}).get("allocatable") or {}).items() if "nvidia.com" in k}
    return NodeReport(
        node=meta["name"],
        ready=not blocking,
        blocking=blocking,
        steps=tuple(steps),
        allocatable=allocatable,
        product=labels.get("nvidia.com/gpu.product", ""),
        driver=labels.get("nvidia.com/cuda.driver-version.full", ""),
        upgrade_state=state,
        upgrade_failure=failure,
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
