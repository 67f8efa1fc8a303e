"""The node explanation behind `gpu-operator status`: the first step a node waits on, and why."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.reconcile.explain import CHAIN, explain_node

pytestmark = pytest.mark.unit


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
