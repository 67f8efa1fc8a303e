"""`gpu-operator status` output: the policy's driver-upgrade summary, upgrade waits, and events under --node."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from gpu_operator.cli import status
from gpu_operator.observe.explain import CHAIN, explain_node

FAILURE = "driver pod gpu-operator/nvidia-driver-daemonset-x restarted 3 times (CrashLoopBackOff)"
POLICY = {
    "metadata": {"name": "cluster-policy"},
    "status": {
        "state": "notReady",
        "driverUpgrade": {
            "autoUpgrade": True,
            "message": f"1 upgrading, 2 done, 1 failed of 4 node(s); gpu-2: {FAILURE}",
        },
        "remediation": {
            "enabled": True, "dryRun": False, "maxNodes": 1, "held": ["gpu-3"],
            "message": "1 of at most 1 node(s) in remediation; circuit breaker open: 1 node(s) with a new XID "
                       "held back",
            "nodes": [{"name": "gpu-1", "action": "reboot", "xid": 79, "waiting": "waiting for the node to reboot"}],
        },
    },
}  # fmt: skip


def _pod(app: str) -> Any:
    containers = [{"name": "main", "ready": True, "state": {"running": {}}}]
    return {
        "metadata": {"name": f"{app}-x", "labels": {"app": app}},
        "status": {"phase": "Running", "containerStatuses": containers},
    }


def _node(name: str, state: str, annotations: dict[str, str] | None = None) -> Any:
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu-driver-upgrade-state": state}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}}, "status": {}}


def _gather(**kwargs: Any) -> Any:
    pods = [_pod(app) for _, app in CHAIN]
    event = {
        "type": "Warning", "reason": "GPUDriverUpgrade", "message": f"upgrade failed: {FAILURE}",
        "lastTimestamp": "2025-01-01T10:05:00Z", "involvedObject": {"kind": "Node", "name": "gpu-2"},
    }  # fmt: skip
    failed = _node("gpu-2", "upgrade-failed", {"nvidia.com/gpu-driver-upgrade-failure": FAILURE})
    reports = [
        explain_node(_node("gpu-1", "validation-required"), pods=pods),
        explain_node(failed, pods=pods, events=[event] if kwargs.get("node_name") == "gpu-2" else []),
    ]
    return [POLICY], reports


def test_table_says_which_nodes_wait_on_the_upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "gather", _gather)
    monkeypatch.setattr(status, "operand_implementations", lambda **kwargs: {})
    result = CliRunner().invoke(status.status_command, [], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"driver upgrades: 1 upgrading, 2 done, 1 failed of 4 node(s); gpu-2: {FAILURE}" in out
    assert "driver upgrade: validation-required" in out
    assert "remediation: 1 of at most 1 node(s) in remediation; circuit breaker open: 1 node(s)" in out
    assert "gpu-1: reboot after XID 79: waiting for the node to reboot" in out
    assert "driver upgrade failed: driver pod" in out


def test_node_view_shows_the_event_behind_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "gather", _gather)
    monkeypatch.setattr(status, "operand_implementations", lambda **kwargs: {})
    result = CliRunner().invoke(status.status_command, ["--node", "gpu-2"])
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert f"driver-upgrade     waiting  driver upgrade failed: {FAILURE}" in lines
    assert f"event: Warning GPUDriverUpgrade (at 2025-01-01T10:05:00Z): upgrade failed: {FAILURE}" in lines
    assert "driver             done  ready" in lines


def test_status_names_the_operands_that_run_nvidia_images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "gather", _gather)
    chosen = {"nvidia-driver-daemonset-ubuntu22.04": "nvidia", "nvidia-device-plugin-daemonset": "agent"}
    monkeypatch.setattr(status, "operand_implementations", lambda **kwargs: chosen)
    out = CliRunner().invoke(status.status_command, [], env={"COLUMNS": "200"}).output
    assert "NVIDIA's images (NVIDIA's contract): nvidia-driver-daemonset-ubuntu22.04" in out
    assert "nvidia-device-plugin-daemonset" not in out.split("NVIDIA's images")[1]
    shown = CliRunner().invoke(status.status_command, ["-o", "json"])
    assert json.loads(shown.output)["implementations"] == chosen


def test_implementations_read_the_daemonset_annotation() -> None:
    sets: list[dict[str, Any]] = [
        {"metadata": {"name": "b", "annotations": {"nvidia.com/gpu-operator.implementation": "nvidia"}}},
        {"metadata": {"name": "a", "annotations": {"nvidia.com/gpu-operator.implementation": "agent"}}},
        {"metadata": {"name": "c"}},  # not an operand of ours
    ]
    assert status.implementations(sets) == {"a": "agent", "b": "nvidia"}
