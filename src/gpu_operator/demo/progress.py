"""Live progress of the demo: each simulated node's readiness chain and the ClusterPolicy's state.

A node's link is ready when its operand pod on that node is Ready and, for the links the validator
checks, the validator's file (``/run/nvidia/validations/<name>-ready``) exists in the node's simulated
host root. The table is rebuilt from the API server and the host roots every second.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.typed import Client, Node, Pod
from gpu_operator.names import keys
from gpu_operator.names.objects import is_ready
from gpu_operator.sim.control.simulator import Simulator

JSON = dict[str, Any]
VALIDATIONS = "run/nvidia/validations"
PRODUCT_LABEL = keys.GPU_PRODUCT


@dataclass(frozen=True, kw_only=True)
class Link:
    """One link of the readiness chain: its column, DaemonSet and validator file (if any)."""

    title: str
    daemonset: str
    ready_file: str | None = None


CHAIN: tuple[Link, ...] = (
    Link(title="driver", daemonset="nvidia-driver-daemonset", ready_file="driver-ready"),
    Link(title="toolkit", daemonset="nvidia-container-toolkit-daemonset", ready_file="toolkit-ready"),
    Link(title="validation", daemonset="nvidia-operator-validator", ready_file="cuda-ready"),
    Link(title="device plugin", daemonset="nvidia-device-plugin-daemonset", ready_file="plugin-ready"),
    Link(title="feature discovery", daemonset="gpu-feature-discovery"),
    Link(title="exporter", daemonset="nvidia-dcgm-exporter"),
)


@dataclass(frozen=True, kw_only=True)
class NodeRow:
    """What the table shows for one node; ``waiting`` names the links that are not ready."""

    name: str
    profile: str
    cells: tuple[Text, ...]
    allocatable: str
    product: str
    waiting: tuple[str, ...]


def _pod_ready(pod: JSON) -> bool:
    return is_ready(pod)


def operand_pods(*, client: Client, namespace: str) -> dict[tuple[str, str], JSON]:
    """(DaemonSet, node) -> that DaemonSet's pod on the node."""
    found: dict[tuple[str, str], JSON] = {}
    for pod in client.list(Pod, namespace=namespace):
        obj: JSON = pod.to_dict()
        owners = obj["metadata"].get("ownerReferences") or []
        node = (obj.get("spec") or {}).get("nodeName")
        for owner in owners:
            if owner.get("kind") == "DaemonSet" and node:
                # Every driver DaemonSet (one per OS tag or kernel) is the table's one driver column.
                driver = owner["name"].startswith("nvidia-driver-daemonset")
                found[("nvidia-driver-daemonset" if driver else owner["name"], node)] = obj
    return found


def gpu_resources(node: JSON) -> dict[str, str]:
    """The node's allocatable ``nvidia.com/gpu`` and ``nvidia.com/mig-*`` resources."""
    allocatable: Mapping[str, str] = (node.get("status") or {}).get("allocatable") or {}
    return {k: v for k, v in sorted(allocatable.items()) if k.startswith("nvidia.com/") and v != "0"}


def node_rows(*, client: Client, sim: Simulator, namespace: str) -> list[NodeRow]:
    pods = operand_pods(client=client, namespace=namespace)
    rows: list[NodeRow] = []
    for name in sorted(sim.nodes):
        sim_node = sim.node(name)
        node: JSON = client.get(Node, name).to_dict()
        labels = node["metadata"].get("labels") or {}
        gpus = sim_node.profile.gpu_count
        cells: list[Text] = []
        waiting: list[str] = []
        for link in CHAIN:
            if not gpus:
                cells.append(Text("n/a", style="dim"))
                continue
            pod = pods.get((link.daemonset, name))
            has_file = link.ready_file is None or (sim_node.host_root / VALIDATIONS / link.ready_file).exists()
            if pod is not None and _pod_ready(pod) and has_file:
                cells.append(Text("ready", style="green"))
                continue
            waiting.append(link.title)
            if pod is None:
                cells.append(Text("no pod", style="dim"))
            else:
                phase = (pod.get("status") or {}).get("phase", "Pending")
                cells.append(Text(phase.lower() if not has_file else "starting", style="yellow"))
        resources = gpu_resources(node)
        rows.append(
            NodeRow(
                name=name,
                profile=f"{sim_node.profile.name} ({gpus} GPU{'s' if gpus != 1 else ''})",
                cells=tuple(cells),
                allocatable=", ".join(f"{k.removeprefix('nvidia.com/')}={v}" for k, v in resources.items()) or "-",
                product=labels.get(PRODUCT_LABEL, "-"),
                waiting=tuple(waiting),
            )
        )
    return rows


def policy_status(*, client: Client, name: str) -> tuple[str, str]:
    """The policy's ``status.state`` and its Ready condition's message."""
    obj: JSON = client.get(ClusterPolicyResource, name).to_dict()  # type: ignore[no-untyped-call]
    status = obj.get("status") or {}
    ready: JSON = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    message = ready.get("message") or ready.get("reason") or ""
    return str(status.get("state") or "(none yet)"), str(message)


def render(*, rows: list[NodeRow], state: str, message: str, elapsed: float) -> Group:
    table = Table(title="GPU nodes: readiness chain", title_justify="left")
    for column in ("node", "profile/GPUs", *(link.title for link in CHAIN), "allocatable", "product"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.name, row.profile, *row.cells, row.allocatable, row.product)
    style = "green" if state == "ready" else "yellow"
    header = Text.assemble(
        "ClusterPolicy state: ", (state, f"bold {style}"), f"  {message}", (f"  ({elapsed:.0f} s)", "dim")
    )
    return Group(header, table)


def _summary(*, rows: list[NodeRow], state: str) -> str:
    gpu_rows = [r for r in rows if r.cells and r.cells[0].plain != "n/a"]
    done = sum(1 for r in gpu_rows if not r.waiting)
    waiting = sorted({link for r in gpu_rows for link in r.waiting}, key=[c.title for c in CHAIN].index)
    tail = f"; waiting for {', '.join(waiting)}" if waiting else ""
    return f"policy {state}: {done}/{len(gpu_rows)} GPU nodes ready{tail}"


def watch_until_ready(
    *, console: Console, client: Client, sim: Simulator, namespace: str, policy: str, timeout: float = 180.0
) -> float:
    """Refresh the table every second until the policy is ``ready``; returns the seconds it took."""
    begin = time.monotonic()
    rows: list[NodeRow] = []
    state, message = "(none yet)", ""
    last_summary = ""
    with Live(console=console, refresh_per_second=2, auto_refresh=False) as live:
        while True:
            elapsed = time.monotonic() - begin
            rows = node_rows(client=client, sim=sim, namespace=namespace)
            state, message = policy_status(client=client, name=policy)
            live.update(render(rows=rows, state=state, message=message, elapsed=elapsed), refresh=True)
            summary = _summary(rows=rows, state=state)
            if not console.is_terminal and summary != last_summary:
                # Without a terminal Live shows only the final table: log each change as a line instead.
                console.print(f"  {elapsed:5.1f} s  {summary}", highlight=False)
                last_summary = summary
            if state == "ready" and not any(r.waiting for r in rows):
                break
            if elapsed > timeout:
                break
            time.sleep(1.0)
    if not console.is_terminal:
        console.line()
    if state == "ready" and not any(r.waiting for r in rows):
        return elapsed
    pending = "; ".join(f"{r.name}: {', '.join(r.waiting)}" for r in rows if r.waiting) or "every node link is ready"
    raise click.ClickException(
        f"the ClusterPolicy is not ready after {timeout:.0f} s (state {state}: {message}); not ready: {pending}"
    )
