"""The node explanation behind `gpu-operator status`: the first step a node waits on, and why."""

from __future__ import annotations

from typing import Any

from gpu_operator.observe.explain import CHAIN, disabled_steps, explain_node


def _pod(app: str, *, init: list[dict[str, Any]] | None = None, phase: str = "Running", ready: bool = True) -> Any:
    return {
        "metadata": {"name": f"{app}-x", "labels": {"app": app}},
        "status": {
            "phase": phase,
            "initContainerStatuses": init or [],
            "containerStatuses": [{"name": "main", "ready": ready, "state": {"running": {}}}],
        },
    }


NODE = {
    "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}},
}


def test_all_ready() -> None:
    report = explain_node(NODE, pods=[_pod(app) for _, app in CHAIN])
    assert report.ready
    assert report.blocking == ""
    assert report.allocatable == {"nvidia.com/gpu": "8"}


def test_stuck_in_init_names_the_wait() -> None:
    waiting = [{"name": "toolkit-validation", "state": {"running": {}}}]
    pods = [_pod(app) for _, app in CHAIN[:3]]
    pods.append(_pod("nvidia-device-plugin-daemonset", init=waiting, phase="Pending", ready=False))
    report = explain_node(NODE, pods=pods)
    assert not report.ready
    assert report.blocking.startswith("device-plugin: init container toolkit-validation is still running")


def test_missing_pod_and_labels() -> None:
    labels = {
        "nvidia.com/gpu.deploy.driver": "pre-installed",
        "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
    }
    node = {"metadata": {"name": "gpu-2", "labels": labels}, "status": {}}
    pods = [_pod(app) for _, app in CHAIN[1:3]]
    report = explain_node(node, pods=pods)
    steps = {s.name: s for s in report.steps}
    assert steps["driver"].done  # a host driver is fine
    assert steps["exporter"].done  # an opt-out is not a problem
    assert not steps["device-plugin"].done
    assert report.blocking == "device-plugin: nvidia.com/gpu.deploy label is 'paused-for-mig-change'"
    crash = [{"name": "driver-validation", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    report = explain_node(NODE, pods=[_pod("nvidia-driver-daemonset", init=crash)])
    assert report.blocking == "driver: init container driver-validation waiting: CrashLoopBackOff"
    assert explain_node(NODE, pods=[]).blocking.startswith("driver: no pod on this node")


def _upgrading(state: str, *, annotations: dict[str, str] | None = None) -> Any:
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu-driver-upgrade-state": state}
    return {"metadata": {"name": "gpu-3", "labels": labels, "annotations": annotations or {}}, "status": {}}


def _event(*, kind: str, name: str, reason: str, message: str, at: str, kind_of: str = "Warning") -> Any:
    return {
        "type": kind_of,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "count": 1,
        "involvedObject": {"kind": kind, "name": name},
    }


def test_mid_upgrade_says_so_before_the_chain() -> None:
    restarting = _pod("nvidia-driver-daemonset", phase="Running", ready=False)
    pods = [restarting, *(_pod(app) for _, app in CHAIN[1:])]
    report = explain_node(_upgrading("pod-restart-required"), pods=pods)
    assert not report.ready
    assert report.upgrade_state == "pod-restart-required"
    # What the node waits on first (the upgrade), then what the upgrade waits on (the new driver).
    assert report.blocking == "driver upgrade: pod-restart-required (driver: container main is not ready)"
    assert report.steps[0].name == "driver-upgrade"
    assert not report.steps[0].done


def test_mid_upgrade_with_every_operand_ready() -> None:
    report = explain_node(_upgrading("cordon-required"), pods=[_pod(app) for _, app in CHAIN])
    assert report.blocking == "driver upgrade: cordon-required"


def test_idle_upgrade_states_do_not_block() -> None:
    for state in ("upgrade-done", "upgrade-required", ""):
        report = explain_node(_upgrading(state), pods=[_pod(app) for _, app in CHAIN])
        assert report.ready, state
        assert [s.name for s in report.steps] == [name for name, _ in CHAIN]


def test_upgrade_failed_names_the_recorded_failure_and_the_node_event() -> None:
    reason = "driver pod gpu-operator/nvidia-driver-daemonset-x restarted 3 times (CrashLoopBackOff)"
    node = _upgrading("upgrade-failed", annotations={"nvidia.com/gpu-driver-upgrade-failure": reason})
    events = [
        _event(kind="Node", name="gpu-3", reason="GPUDriverUpgrade", message="cordoned", at="2025-01-01T10:00:00Z",
               kind_of="Normal"),
        _event(kind="Node", name="gpu-3", reason="DriverManagerFailed", message="old", at="2025-01-01T10:01:00Z"),
        _event(kind="Node", name="gpu-3", reason="GPUDriverUpgrade", message=f"upgrade failed: {reason}",
               at="2025-01-01T10:05:00Z"),
        _event(kind="Node", name="gpu-9", reason="GPUDriverUpgrade", message="another node", at="2025-01-02T00:00:00Z"),
    ]  # fmt: skip
    report = explain_node(node, pods=[_pod(app) for _, app in CHAIN], events=events)
    assert report.blocking == f"driver upgrade failed: {reason}"
    assert report.upgrade_failure == reason
    upgrade = report.steps[0]
    # The newest Warning about this Node: not the Normal one, not the older one, not another node's.
    assert upgrade.event == f"Warning GPUDriverUpgrade (at 2025-01-01T10:05:00Z): upgrade failed: {reason}"
    assert report.as_json()["steps"][0]["event"] == upgrade.event
    bare = explain_node(_upgrading("upgrade-failed"), pods=[_pod(app) for _, app in CHAIN])
    assert bare.blocking == "driver upgrade failed"
    assert bare.steps[0].event == ""


def test_blocking_pod_carries_its_latest_warning_event() -> None:
    crash = [{"name": "driver-validation", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    pods = [_pod("nvidia-driver-daemonset", init=crash), *(_pod(app) for _, app in CHAIN[1:])]
    events = [
        {
            "type": "Warning",
            "reason": "BackOff",
            "note": "Back-off restarting failed container driver-validation",
            "eventTime": "2025-01-01T10:00:00.123456Z",
            "series": {"count": 7, "lastObservedTime": "2025-01-01T10:03:00.000000Z"},
            "regarding": {"kind": "Pod", "name": "nvidia-driver-daemonset-x"},
        },
        _event(kind="Pod", name="nvidia-container-toolkit-daemonset-x", reason="Unhealthy", message="ready pod",
               at="2025-01-01T10:04:00Z"),
    ]  # fmt: skip
    report = explain_node(NODE, pods=pods, events=events)
    steps = {s.name: s for s in report.steps}
    assert steps["driver"].event == (
        "Warning BackOff (x7, at 2025-01-01T10:03:00Z): Back-off restarting failed container driver-validation"
    )
    assert steps["toolkit"].done
    assert steps["toolkit"].event == ""  # a ready step needs no explanation


def test_crash_loop_names_the_last_exit_even_before_running() -> None:
    crashing = {
        "name": "nvidia-dcgm-exporter",
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 30s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "message": "OSError: address already in use"}},
    }
    exporter = _pod("nvidia-dcgm-exporter", phase="Pending")
    exporter["status"]["containerStatuses"] = [crashing]
    report = explain_node(NODE, pods=[*(_pod(app) for _, app in CHAIN[:-1]), exporter])
    assert report.blocking == (
        "exporter: container nvidia-dcgm-exporter waiting: back-off 30s restarting failed container "
        "(last exit 1: OSError: address already in use)"
    )
    pending = _pod("nvidia-dcgm-exporter", phase="Pending", ready=False)
    pending["status"]["containerStatuses"] = [{"name": "main", "ready": False, "state": {}}]
    report = explain_node(NODE, pods=[*(_pod(app) for _, app in CHAIN[:-1]), pending])
    assert report.blocking == "exporter: pod nvidia-dcgm-exporter-x is Pending"


def test_an_unregistered_plugin_is_named_before_the_validator_waiting_for_it() -> None:
    from gpu_operator.observe.explain import explain_node  # noqa: PLC0415

    def pod(app: str, **status: object) -> dict[str, object]:
        return {"metadata": {"name": f"{app}-x", "labels": {"app": app}}, "status": {"phase": "Running", **status}}

    ready = {"conditions": [{"type": "Ready", "status": "True"}],
             "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}]}  # fmt: skip
    waiting = {
        "phase": "Pending",
        "initContainerStatuses": [{"name": "plugin-validation", "ready": False, "state": {"running": {}}}],
    }
    not_ready = {"containerStatuses": [{"name": "nvidia-device-plugin", "ready": False, "state": {"running": {}}}]}
    pods = [
        pod("nvidia-driver-daemonset", **ready),
        pod("nvidia-container-toolkit-daemonset", **ready),
        pod("nvidia-operator-validator", **waiting),
        pod("nvidia-device-plugin-daemonset", **not_ready),
    ]
    node = {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.present": "true"}}, "status": {}}
    report = explain_node(node, pods=pods)
    assert report.blocking.startswith("device-plugin: "), report.blocking


def test_a_waiting_check_is_named_in_its_own_words_from_its_last_log_line() -> None:
    waiting = [{"name": "driver-validation", "state": {"running": {}}}]
    pods = [_pod(app) for _, app in CHAIN if app != "nvidia-operator-validator"]
    pods.append(_pod("nvidia-operator-validator", init=waiting, phase="Pending", ready=False))
    line = (
        "2026-12-01 23:34:37,721 gpu_operator.agents.validator.program.driver waiting for validator[gpu-1] "
        "driver: the check to pass (20 s so far): NVML: Driver Not Loaded"
    )
    report = explain_node(NODE, pods=pods, last_lines={("nvidia-operator-validator-x", "driver-validation"): line})
    assert report.blocking == (
        "validation: init container driver-validation is still running: waiting for validator[gpu-1] "
        "driver: the check to pass (20 s so far): NVML: Driver Not Loaded"
    )
    assert explain_node(NODE, pods=pods).blocking.endswith("is still running (waiting for its prerequisite)")


def test_a_step_the_policy_turns_off_is_done_not_missing() -> None:
    # driver.enabled=false (the driver on the host): no driver pod is expected on the node.
    policy = {"spec": {"driver": {"enabled": False}, "dcgmExporter": {"enabled": False}}}
    off = disabled_steps(policy)
    assert off == {"driver", "exporter"}
    pods = [_pod(app) for name, app in CHAIN if name not in off]
    report = explain_node(NODE, pods=pods, disabled=off)
    assert report.ready
    assert report.steps[0].detail == "disabled in the ClusterPolicy (the driver is on the host)"
    assert explain_node(NODE, pods=pods).blocking.startswith("driver: no pod on this node")
    assert disabled_steps(None) == disabled_steps({"spec": {"driver": {"enabled": "sometimes"}}}) == frozenset()
