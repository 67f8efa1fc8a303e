"""Container records and the pod status a kubelet reports for them (pure).

The runtime keeps one :class:`ContainerRecord` per container and calls :func:`pod_status` after every
change; a :class:`~gpu_operator.sim.kubelet.statuswriter.StatusWriter` sends the result (and writes it
back when someone else changed it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.sim.objects import time_text

JSON = dict[str, Any]
WAITING = "waiting"
RUNNING = "running"
TERMINATED = "terminated"


@dataclass(kw_only=True)
class ContainerRecord:
    """The runtime state of one container."""

    name: str
    image: str
    init: bool = False
    sidecar: bool = False
    state: str = WAITING
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    exit_code: int | None = None
    restart_count: int = 0
    ready: bool = False
    container_id: str = ""
    last_terminated: JSON | None = None
    extra: JSON = field(default_factory=dict)

    def waiting(self, reason: str, message: str = "") -> None:
        self.state, self.reason, self.message, self.ready = WAITING, reason, message, False

    def running(self, *, now: dt.datetime, container_id: str) -> None:
        self.state, self.reason, self.message = RUNNING, "", ""
        self.started_at, self.finished_at, self.exit_code = now, None, None
        self.container_id = container_id

    def terminated(self, *, now: dt.datetime, exit_code: int, reason: str, message: str = "") -> None:
        self.state, self.reason, self.message, self.ready = TERMINATED, reason, message, False
        self.finished_at, self.exit_code = now, exit_code

    def _terminated_json(self) -> JSON:
        body: JSON = {
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "reason": self.reason,
            "startedAt": time_text(self.started_at) if self.started_at else None,
            "finishedAt": time_text(self.finished_at) if self.finished_at else None,
            "containerID": self.container_id,
        }
        if self.message:
            body["message"] = self.message
        return body

    def restarting(self) -> None:
        """Remember the last termination and count a restart (before the next run)."""
        self.last_terminated = self._terminated_json()
        self.restart_count += 1

    def status_json(self) -> JSON:
        if self.state == RUNNING:
            state: JSON = {RUNNING: {"startedAt": time_text(self.started_at) if self.started_at else None}}
        elif self.state == TERMINATED:
            state = {TERMINATED: self._terminated_json()}
        else:
            state = {WAITING: {"reason": self.reason, **({"message": self.message} if self.message else {})}}
        body: JSON = {
            "name": self.name,
            "image": self.image,
            "imageID": f"sim://{self.image}",
            "ready": self.ready,
            "started": self.state == RUNNING,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": {TERMINATED: self.last_terminated} if self.last_terminated else {},
        }
        if self.container_id:
            body["containerID"] = self.container_id
        return body


def _init_done(record: ContainerRecord) -> bool:
    if record.sidecar:
        return record.state == RUNNING
    return record.state == TERMINATED and record.exit_code == 0


def pod_phase(*, records: list[ContainerRecord], restart_policy: str, finished: bool) -> str:
    """Pending, Running, Succeeded or Failed. ``finished``: no container will run again."""
    inits = [r for r in records if r.init]
    apps = [r for r in records if not r.init]
    if finished and apps and all(r.state == TERMINATED for r in apps):
        return "Succeeded" if all(r.exit_code == 0 for r in apps) else "Failed"
    if finished and any(r.state == TERMINATED and r.exit_code for r in inits) and restart_policy == "Never":
        return "Failed"
    if not all(_init_done(r) for r in inits):
        return "Pending"
    if any(r.state in (RUNNING, TERMINATED) for r in apps):
        return "Running"
    return "Pending"


def pod_status(
    *,
    records: list[ContainerRecord],
    phase: str,
    host_ip: str,
    pod_ip: str,
    start_time: dt.datetime,
    transitions: dict[str, tuple[str, dt.datetime]],
    scheduled: JSON | None,
    now: dt.datetime,
    reason: str = "",
    message: str = "",
) -> JSON:
    """The ``status`` to report. ``transitions`` remembers each condition's last change (updated here)."""
    inits = [r for r in records if r.init]
    apps = [r for r in records if not r.init]
    initialized = all(_init_done(r) for r in inits) or any(r.state != WAITING for r in apps)
    containers_ready = bool(apps) and all(r.ready for r in apps) and phase == "Running"
    wanted = {
        "PodReadyToStartContainers": phase not in ("Succeeded", "Failed") or bool(apps),
        "Initialized": initialized,
        "ContainersReady": containers_ready,
        "Ready": containers_ready,
    }
    conditions: list[JSON] = [scheduled or {"type": "PodScheduled", "status": "True"}]
    for kind, value in wanted.items():
        text = "True" if value else "False"
        previous = transitions.get(kind)
        if previous is None or previous[0] != text:
            transitions[kind] = (text, now)
        conditions.append({"type": kind, "status": text, "lastTransitionTime": time_text(transitions[kind][1])})
    status: JSON = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": time_text(start_time),
        "initContainerStatuses": [r.status_json() for r in inits],
        "containerStatuses": [r.status_json() for r in apps],
    }
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status
