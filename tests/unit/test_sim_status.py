"""Container records and the pod status the simulated kubelet reports."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, cast

import httpx
import pytest

from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.sim.kubelet.podstatus import ContainerRecord, pod_phase, pod_status
from gpu_operator.sim.kubelet.statuswriter import StatusWriter, reported

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(seconds=5)


def _running(name: str, *, init: bool = False, ready: bool = True) -> ContainerRecord:
    record = ContainerRecord(name=name, image="img", init=init)
    record.running(now=T0, container_id=f"sim://{name}")
    record.ready = ready
    return record


def _done(name: str, code: int, *, init: bool = False) -> ContainerRecord:
    record = _running(name, init=init)
    record.terminated(now=T1, exit_code=code, reason="Completed" if code == 0 else "Error")
    return record


@pytest.mark.parametrize(
    ("records", "policy", "finished", "phase"),
    [
        ([ContainerRecord(name="c", image="i")], "Always", False, "Pending"),
        ([_running("c")], "Always", False, "Running"),
        ([_done("i", 0, init=True), _running("c")], "Always", False, "Running"),
        ([_running("i", init=True), ContainerRecord(name="c", image="i")], "Always", False, "Pending"),
        ([_done("c", 0)], "Never", True, "Succeeded"),
        ([_done("c", 0), _done("d", 2)], "OnFailure", True, "Failed"),
        ([_done("i", 1, init=True), ContainerRecord(name="c", image="i")], "Never", True, "Failed"),
    ],
)
def test_pod_phase(records: list[ContainerRecord], policy: str, finished: bool, phase: str) -> None:
    assert pod_phase(records=records, restart_policy=policy, finished=finished) == phase


def test_status_conditions_and_transitions() -> None:
    transitions: dict[str, tuple[str, dt.datetime]] = {}
    records = [_done("init", 0, init=True), _running("app", ready=False)]
    common = {
        "host_ip": "172.16.0.1",
        "pod_ip": "10.64.0.1",
        "start_time": T0,
        "transitions": transitions,
        "scheduled": None,
    }
    first = pod_status(records=records, phase="Running", now=T0, **common)  # type: ignore[arg-type]
    assert {c["type"]: c["status"] for c in first["conditions"]} == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    records[1].ready = True
    second = pod_status(records=records, phase="Running", now=T1, **common)  # type: ignore[arg-type]
    ready = next(c for c in second["conditions"] if c["type"] == "Ready")
    initialized = next(c for c in second["conditions"] if c["type"] == "Initialized")
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-01-01T00:00:05Z")
    assert initialized["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged condition keeps its time
    assert second["podIPs"] == [{"ip": "10.64.0.1"}]
    assert second["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    app = second["containerStatuses"][0]
    assert (app["ready"], app["started"], app["restartCount"]) == (True, True, 0)


def test_restart_keeps_the_last_termination() -> None:
    record = _done("c", 1)
    record.message = "boom"
    record.restarting()
    record.waiting("CrashLoopBackOff", "back-off 1s")
    body = record.status_json()
    assert body["restartCount"] == 1
    assert body["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1s"}}
    assert body["lastState"]["terminated"]["exitCode"] == 1
    assert body["lastState"]["terminated"]["message"] == "boom"


class _FlakyApi:
    """Fails the first patches with the given errors, then records the bodies it receives."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.bodies: list[Any] = []
        self.delivered = asyncio.Event()

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> dict[str, Any]:
        if self.errors:
            raise self.errors.pop(0)
        self.bodies.append(body)
        self.delivered.set()
        return {}


def test_status_writer_retries_after_transport_errors_and_api_errors() -> None:
    """A timeout or a refused write must not end the writer: the pod would never report its status again."""

    async def run() -> list[Any]:
        request = httpx.Request("PATCH", "https://api/pods/p/status")
        api = _FlakyApi(httpx.PoolTimeout("pool", request=request), ApiError(code=500, reason="x", message="y"))
        writer = StatusWriter(
            api=cast(ApiClient, api), path="/p/status", compute=lambda: {"phase": "Running"}, label="p", retry_delay=0
        )
        writer.start()
        writer.changed()
        await asyncio.wait_for(api.delivered.wait(), 5)
        await writer.stop()
        return api.bodies

    assert asyncio.run(run()) == [{"status": {"phase": "Running"}}]


def test_status_writer_ends_when_the_pod_is_gone() -> None:
    async def run() -> bool:
        api = _FlakyApi(ApiError(code=404, reason="NotFound", message="gone"))
        writer = StatusWriter(api=cast(ApiClient, api), path="/p/status", compute=lambda: {}, label="p", retry_delay=0)
        writer.start()
        writer.changed()
        task = writer._task
        assert task is not None
        await asyncio.wait_for(asyncio.shield(task), 5)
        return task.done() and not api.bodies

    assert asyncio.run(run())


# -- the status manager: a status someone else changed is written back -----------------------------------

OURS = {
    "phase": "Running",
    "conditions": [{"type": t, "status": "True"} for t in ("Initialized", "ContainersReady", "Ready")],
    "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}],
}
MARKED = {**OURS, "conditions": [*OURS["conditions"][:2], {"type": "Ready", "status": "False"}]}  # MarkPodsNotReady


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_reported_keeps_only_what_the_kubelet_owns() -> None:
    relabelled = {**OURS, "qosClass": "BestEffort", "conditions": [*OURS["conditions"], {"type": "PodScheduled"}]}
    assert reported(relabelled) == reported(OURS)
    assert reported(MARKED) != reported(OURS)


def test_a_status_marked_not_ready_is_written_back_with_back_off() -> None:
    async def run() -> tuple[list[Any], int]:
        api, clock = _FlakyApi(), _Clock()
        writer = StatusWriter(api=cast(ApiClient, api), path="/p/status", compute=lambda: OURS, label="p",
                              repair_interval=10, repair_max=40, clock=clock)  # fmt: skip
        writer.start()
        writer.changed()
        await _settle()
        writer.observed(OURS)  # our own write's echo, and a label change: nothing to do
        writer.observed({**OURS, "qosClass": "BestEffort"})
        await _settle()
        assert len(api.bodies) == 1
        writer.observed(MARKED)  # the node-lifecycle controller: written back at once
        await _settle()
        assert api.bodies[-1] == {"status": OURS}
        assert len(api.bodies) == 2
        clock.now += 1
        writer.observed(MARKED)  # undone again within repair_interval: waits (a timer, not a loop)
        await _settle()
        assert len(api.bodies) == 2
        writer.repair_now()  # the node posted Ready: at once
        await _settle()
        repairs = writer.repairs
        await writer.stop()
        return api.bodies, repairs

    bodies, repairs = asyncio.run(run())
    assert len(bodies) == 3
    assert repairs == 2


def test_a_late_echo_of_an_older_write_is_not_written_back() -> None:
    async def run() -> int:
        api = _FlakyApi()
        body: dict[str, Any] = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
        writer = StatusWriter(api=cast(ApiClient, api), path="/p/status", compute=lambda: body, label="p",
                              repair_interval=0)  # fmt: skip
        writer.start()
        writer.changed()
        await _settle()
        older = dict(body)
        body = OURS
        writer.changed()
        await _settle()
        writer.observed(older)  # the watch trails: the first write's event arrives after the second write
        writer.observed(OURS)
        await _settle()
        await writer.stop()
        return len(api.bodies)

    assert asyncio.run(run()) == 2
