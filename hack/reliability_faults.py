"""The fault half of RELIABILITY.md: issue 22's fault classes, the test that injects each, what it holds,
the recovery it measured (from the chaos tier's results file) and the allowance it is held to.

The chaos tests (``tests/chaos``) write their figures with ``tests.chaos.harness.record``; this module
only reads that JSON and lays it out, so a figure in the table is always one a test measured and
asserted, never typed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fault:
    """One fault class: its name as the chaos test records it, the test, what must hold, the figure
    compared with the allowance (a key of the recorded results) and the allowance's anchor."""

    name: str
    test: str
    holds: str
    figure: str
    anchor: str


_OUTAGE = "operator never exits or restarts (same process, `/healthz` green)"
_ROLLOUT = (
    "each driver pod replaced exactly once; every node cordoned once and uncordoned once; no node steps back "
    "a state (none lost); never more than maxParallelUpgrades in progress"
)
_LIMITER = "≤ 5 s: upstream's failure limiter cap (3 s) plus one Lease retry (2 s); goals-and-anchors §9 #9"

FAULTS = (
    Fault("API server down during a reconcile", "tests/chaos/test_control_plane_outages.py",
          f"{_OUTAGE}; the change made before the outage applied after it; only the changed operand's pods "
          "replaced; no node cordoned. The figure counts from the API server serving ClusterPolicies again "
          "(`api_serving_policies_s` after its /readyz: custom resources answer 503 until then)",
          "change_applied_after_api_s", _LIMITER),
    Fault("API server down during a driver upgrade", "tests/chaos/test_control_plane_outages.py",
          f"{_OUTAGE}; {_ROLLOUT}", "back_in_charge_s", _LIMITER),
    Fault("etcd restarted", "tests/chaos/test_control_plane_outages.py",
          f"{_OUTAGE}; the next change reaches its DaemonSet ≤ 5 s; only the changed operand's pods replaced",
          "back_in_charge_after_api_s", _LIMITER),
    Fault("operator SIGKILLed in every upgrade state", "tests/chaos/test_operator_faults.py",
          f"a new process at once, as a Deployment would; {_ROLLOUT}", "back_in_charge_max_s",
          "≤ 30 s from the new process's start (§9 #5); upstream's e2e allows 100 s"),
    Fault("operator found nodes in the states it only passes through", "tests/chaos/test_operator_faults.py",
          "ours moves through cordon-required, drain-required and uncordon-required within one pass, so no kill "
          "finds a node there; NVIDIA's operator records them: a new process finds one node in each (with a new "
          "driver asked for while none ran) and finishes all three: each driver pod replaced exactly once, each "
          "node uncordoned once at the end and never in between, no step back after the found state",
          "back_in_charge_s",
          "≤ 30 s from the new process's start (§9 #5); upstream's e2e allows 100 s"),
    Fault("Lease holder paused (SIGSTOP) past the Lease", "tests/chaos/test_operator_faults.py",
          "the standby takes the Lease; the woken process does not take it back and runs no pass",
          "failover_s", "≤ 17 s: controller-runtime's 15 s Lease + 2 s retry (§9 #6)"),
    Fault("node lost mid-upgrade", "tests/chaos/test_node_lost.py",
          "the other nodes finish (the dead one holds one slot, as upstream's does); the dead node is never "
          "reported upgraded nor uncordoned; once deleted, the upgrade status forgets it",
          "status_forgot_deleted_node_s", "≤ 30 s: upstream's NodeLabeling requeue"),
    Fault("node label or annotation corrupted by hand", "tests/chaos/test_node_faults.py",
          "labels the operator owns repaired; no failed pass; no operand pod replaced (bar the one the "
          "DaemonSet controller removes while its deploy label is empty); no node cordoned",
          "repaired_s", "≤ 30 s: upstream's NodeLabeling requeue"),
    Fault("full disk on a node's host path", "tests/chaos/test_node_faults.py",
          "a real tmpfs filled: the toolkit's real program changes no file, logs the file it could not write "
          "and why, reports not ready, succeeds on its next try once there is space", "retry_after_s",
          "its own retry period (60 s); no upstream figure"),
    Fault("watch 410 Gone", "tests/chaos/test_control_plane_outages.py",
          f"{_OUTAGE}; every watch the operator holds is ended by the API server's 410 ERROR event (sent by "
          "`tests/chaos/watchproxy.py`, a TLS proxy in front of the real API server) as a change arrives: "
          "each cache lists again at once (each 410 logged as such, no back-off), every watch is open again, "
          "the change is applied, only the changed operand's pods replaced, no node cordoned",
          "change_applied_s", f"{_LIMITER}; §9 #7: relist without restart"),
    Fault("leader SIGKILLed, standby takes over", "tests/integration/test_leader_election_real.py",
          "a standby takes over; a clean stop hands over at once", "", "≤ 17 s (asserted, not recorded)"),
    Fault("kubelet and containerd restarted on a real node mid-upgrade",
          "tests/e2e/test_driver_container_real_nodes.py",
          "two real kubelet + containerd nodes, the driver container upgraded; while the first node waits for its "
          "GPU workload to go, its kubelet restarts and then containerd at once (the new kubelet may find no CRI "
          "socket and exit: the node's watcher starts it again, as systemd's Restart=always does on a host): the "
          "evicted workload goes, the upgrade finishes with no node failed or left cordoned, each workload back "
          "on the new driver. Before the watcher kept the kubelet running, the evicted pod stayed Terminating "
          "for good (`tests/e2e/test_node_restart_real_node.py` holds both restart orders)",
          "workload_gone_after_restart_s",
          "≤ 60 s: the kubelet's restart (systemd's RestartSec is 10 s) and the pod's 30 s grace period"),
)  # fmt: skip


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _worst(value: Any) -> float | None:
    if isinstance(value, dict):
        value = max(value.values(), default=None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def verdict(fault: Fault, figures: Mapping[str, Any] | None) -> str:
    """ "met" or "MISSED" with the figure against its allowance; a reason when there is nothing to compare."""
    if not fault.test:
        return "not injected by the suite"
    if figures is None:
        return "not measured in this run" if fault.figure else "asserted by its test"
    worst, allowance = _worst(figures.get(fault.figure)), figures.get("allowance_s")
    if worst is None or allowance is None:
        return "asserted by its test"
    return f"{'met' if worst <= float(allowance) else 'MISSED'}: {worst:g} s (allowance {float(allowance):g} s)"


def rows(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The table's lines: fault, test, what held, every measured figure, and the verdict."""
    lines = ["| fault | injected by | what must hold | measured | allowance (anchor) | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for fault in FAULTS:
        figures = results.get(fault.name)
        measured = "; ".join(f"{k} {_value(v)}" for k, v in sorted((figures or {}).items()) if k != "allowance_s")
        test = f"`{fault.test}`" if fault.test else "—"
        cells = [fault.name, test, fault.holds, measured or "—", fault.anchor or "—", verdict(fault, figures)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines
