"""The privileges table: what a rendered workload asks of its node, each with a reason, and what is missing one."""

from __future__ import annotations

from typing import Any

from gpu_operator.render.privileges import ANY_WORKLOAD, Need, security_table, unexplained, unused, workload_needs


def _daemonset(*, pod: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "DaemonSet", "metadata": {"name": "ds"}, "spec": {"template": {"spec": pod}}}


POD: dict[str, Any] = {
    "hostPID": True,
    "hostNetwork": False,
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "cfg", "configMap": {"name": "c"}}],
    "initContainers": [
        {
            "name": "check",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "root", "mountPath": "/host", "readOnly": True}],
        }
    ],
    "containers": [
        {
            "name": "main",
            "securityContext": {"privileged": True, "runAsUser": 0},
            "volumeMounts": [{"name": "root", "mountPath": "/host"}, {"name": "cfg", "mountPath": "/cfg"}],
        },
        {"name": "sidecar", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
    ],
}


def test_every_privilege_of_pod_and_containers_is_listed() -> None:
    needs = workload_needs([_daemonset(pod=POD), {"kind": "ConfigMap", "metadata": {"name": "x"}}])
    assert [(n.container, n.what) for n in needs] == [
        ("", "hostPID"),
        ("check", "host path / (read-only)"),
        ("main", "host path / (read-write)"),
        ("main", "privileged"),
        ("main", "root (uid 0)"),
        ("sidecar", "capability NET_ADMIN"),
        ("sidecar", "privilege escalation allowed"),  # nothing said: the runtime's default allows it
    ]


def test_a_workload_asking_nothing_lists_nothing() -> None:
    quiet = {
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ]
    }
    assert workload_needs([_daemonset(pod=quiet)]) == []


def test_reasons_are_matched_per_workload_or_shared_and_both_ways_checked() -> None:
    needs = [
        Need(workload="ds", container="main", what="privileged"),
        Need(workload="ds", container="", what="hostPID"),
    ]
    reasons = {
        ("ds", "main", "privileged"): "loads modules",
        (ANY_WORKLOAD, "", "hostPID"): "signals the runtime",
        ("gone", "main", "privileged"): "a workload no longer rendered",
    }
    assert unexplained(needs, reasons) == []
    assert unused(needs, reasons) == [("gone", "main", "privileged")]
    assert unexplained(needs, {}) == needs


def test_table_names_each_workload_once_and_flags_a_missing_reason() -> None:
    needs = [
        Need(workload="ds", container="", what="hostPID"),
        Need(workload="ds", container="main", what="privileged"),
        Need(workload="ds", container="main", what="root (uid 0)"),
    ]
    table = security_table(needs, {("ds", "", "hostPID"): "a | pipe", ("ds", "main", "privileged"): "why"})
    assert table.splitlines()[2:] == [
        "| `ds` | (pod) | hostPID | a \\| pipe |",
        "|  | `main` | privileged | why |",
        "|  |  | root (uid 0) | **no reason recorded** |",
    ]
