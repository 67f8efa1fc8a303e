"""ClusterPolicy and NVIDIADriver status: state, the Ready/Error pair, reasons, messages, requeue."""

from __future__ import annotations

from gpu_operator.observe.readiness import Readiness
from gpu_operator.observe.status import (
    READY_MESSAGE,
    StateResult,
    Status,
    condition_pair,
    driver_status,
    ignored_status,
    policy_status,
    state_result,
)
from gpu_operator.render import ClusterFacts, MissingReference, StateManifests

FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, has_nfd_labels=True)
NOW = "2026-08-01T10:00:00Z"


def conditions(status: Status) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in status.conditions}


def test_everything_ready() -> None:
    results = [StateResult(name="state-driver", status="ready"), StateResult(name="state-dcgm", status="disabled")]
    status = policy_status(results=results, facts=FACTS, generation=3, now=NOW)
    assert status.state == "ready"
    assert status.requeue_after is None
    ready, error = conditions(status)["Ready"], conditions(status)["Error"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "Reconciled", READY_MESSAGE)
    assert (error["status"], error["reason"]) == ("False", "Ready")
    assert ready["observedGeneration"] == 3
    assert status.as_status(namespace="gpu-operator")["namespace"] == "gpu-operator"


def test_states_not_ready_say_which_and_why_and_requeue_in_five_seconds() -> None:
    results = [
        StateResult(name="state-driver", status="notReady", reason="nvidia-driver-daemonset: 1 of 2 pods unavailable"),
        StateResult(name="state-device-plugin", status="notReady"),
        StateResult(name="state-dcgm", status="ready"),
    ]
    status = policy_status(results=results, facts=FACTS, generation=1, now=NOW)
    assert status.state == "notReady"
    assert status.requeue_after == 5.0
    error = conditions(status)["Error"]
    assert error["reason"] == "OperandNotReady"
    assert error["status"] == "True"
    assert str(error["message"]).startswith(
        "ClusterPolicy is not ready; states not ready: [state-driver state-device-plugin]. "
        "state-driver: nvidia-driver-daemonset: 1 of 2 pods unavailable"
    )
    assert conditions(status)["Ready"]["status"] == "False"


def test_failure_uses_the_rate_limiter() -> None:
    status = policy_status(results=[], facts=FACTS, generation=1, now=NOW, failure=("state-driver", "boom"))
    assert (status.state, status.backoff, status.requeue_after) == ("notReady", True, None)
    assert conditions(status)["Error"]["message"] == "Failed to reconcile state-driver: boom"
    assert conditions(status)["Error"]["reason"] == "ReconcileFailed"


def test_no_nfd_and_no_gpu_nodes_requeues_in_45_seconds() -> None:
    facts = ClusterFacts(namespace="gpu-operator")
    status = policy_status(results=[], facts=facts, generation=1, now=NOW)
    assert (status.state, status.requeue_after) == ("ready", 45.0)
    assert conditions(status)["Ready"]["reason"] == "NFDLabelsMissing"


def test_gpu_nodes_without_nfd_are_simply_ready() -> None:
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, has_nfd_labels=False)
    assert conditions(policy_status(results=[], facts=facts, generation=1, now=NOW))["Ready"]["reason"] == "Reconciled"


def test_no_gpu_nodes() -> None:
    facts = ClusterFacts(namespace="gpu-operator", has_nfd_labels=True)
    status = policy_status(results=[], facts=facts, generation=1, now=NOW)
    assert (status.state, conditions(status)["Ready"]["reason"], status.requeue_after) == ("ready", "NoGPUNodes", None)


def test_driver_upgrades_in_progress_keep_the_policy_not_ready() -> None:
    status = policy_status(results=[], facts=FACTS, generation=1, now=NOW, upgrading_nodes=["n2", "n1"])
    assert status.state == "notReady"
    assert "driver upgrades in progress on 2 node(s): n1, n2" in str(conditions(status)["Ready"]["message"])


def test_transition_time_moves_only_when_status_flips() -> None:
    before = condition_pair(ready=False, reason="OperandNotReady", message="x", generation=1, now="T0")
    same = condition_pair(ready=False, reason="OperandNotReady", message="y", generation=2, now="T1", previous=before)
    assert [c["lastTransitionTime"] for c in same] == ["T0", "T0"]
    flipped = condition_pair(ready=True, reason="Reconciled", message="z", generation=2, now="T2", previous=same)
    assert [c["lastTransitionTime"] for c in flipped] == ["T2", "T2"]


def test_state_result_from_manifests() -> None:
    missing = MissingReference(kind="ConfigMap", name="cm", field="spec.devicePlugin.config.name", namespace="ns")
    state = StateManifests(name="state-device-plugin", enabled=True, missing=(missing,))
    result = state_result(state, Readiness(ready=True))
    assert result.status == "notReady"
    assert "ConfigMap 'cm' named by spec.devicePlugin.config.name does not exist" in result.reason
    assert state_result(StateManifests(name="s", enabled=False)).status == "disabled"
    assert state_result(StateManifests(name="s", enabled=True), Readiness(ready=False, reason="r")).reason == "r"
    assert state_result(StateManifests(name="s", enabled=True)).status == "ready"


def test_ignored() -> None:
    assert ignored_status().as_status(namespace="ns") == {"state": "ignored", "namespace": "ns"}


def test_driver_status_outcomes() -> None:
    disabled = driver_status(active=False, readiness=Readiness(ready=True), conflicts={}, generation=1, now=NOW)
    assert disabled.state == "disabled"
    conflict = driver_status(
        active=True, readiness=Readiness(ready=True), conflicts={"n1": ("a", "b")}, generation=1, now=NOW
    )
    assert conflict.state == "notReady"
    assert conditions(conflict)["Error"]["reason"] == "ConflictingNodeSelector"
    assert "n1 (a, b)" in str(conditions(conflict)["Error"]["message"])
    waiting = driver_status(
        active=True,
        readiness=Readiness(ready=False, reason="ds: 0 of 1 pods available"),
        conflicts={},
        skipped_nodes=["x"],
        generation=1,
        now=NOW,
    )
    assert (waiting.state, waiting.requeue_after) == ("notReady", 5.0)
    assert conditions(waiting)["Ready"]["reason"] == "DriverNotReady"
    assert str(conditions(waiting)["Ready"]["message"]).startswith("Waiting for driver pod to be ready: ")
    ready = driver_status(active=True, readiness=Readiness(ready=True), conflicts={}, generation=1, now=NOW)
    assert ready.state == "ready"
