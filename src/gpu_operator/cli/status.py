"""``gpu-operator status``: the policy's state, then every GPU node and the first step it waits on.

Works against any cluster (``--kubeconfig`` or ``KUBECONFIG``): it reads only the ClusterPolicy, the
Nodes and the operand pods (and, for ``--node``, the Warning events about that node and its operand
pods), so an administrator of a real cluster gets the same answer as the demo. Under the policy's
state it prints ``status.driverUpgrade.message``, the upgrade controller's one-line progress summary.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpu_operator.cli.inputs import kubeconfig_option
from gpu_operator.names import keys
from gpu_operator.observe.explain import NodeReport, disabled_steps, explain_node, running_init_containers


def _client(kubeconfig: str | None) -> Any:
    from gpu_operator.kube.connect import sync_client  # noqa: PLC0415 - keep other commands light

    return sync_client(kubeconfig=kubeconfig)


def _warnings(client: Any, *, namespace: str, node: str) -> list[dict[str, Any]]:
    """Warning events about ``node`` (any namespace: agents and the controller record them in default)
    and about the pods of the operator namespace; none when this user may not list events."""
    from gpu_operator.kube.typed import ApiError, Event  # noqa: PLC0415

    about_node = {"involvedObject.kind": "Node", "involvedObject.name": node, "type": "Warning"}
    try:
        found = [e.to_dict() for e in client.list(Event, namespace="*", fields=about_node)]
        found += [e.to_dict() for e in client.list(Event, namespace=namespace, fields={"type": "Warning"})]
    except ApiError:  # events only add detail: the explanation stands without them
        return []
    return found


def implementations(daemonsets: list[dict[str, Any]]) -> dict[str, str]:
    """Operand DaemonSet -> ``agent`` (our agent) or ``nvidia`` (NVIDIA's image and contract)."""
    out = {}
    for ds in daemonsets:
        kind = (ds["metadata"].get("annotations") or {}).get(keys.IMPLEMENTATION)
        if kind:
            out[ds["metadata"]["name"]] = kind
    return dict(sorted(out.items()))


def gather(
    *, kubeconfig: str | None, namespace: str | None, node_name: str | None = None
) -> tuple[list[dict[str, Any]], list[NodeReport]]:
    """ClusterPolicies (as dicts) and one report per GPU node; with ``node_name``, with its Warning events."""
    from gpu_operator.kube.api import ClusterPolicyResource  # noqa: PLC0415
    from gpu_operator.kube.typed import Node, Pod  # noqa: PLC0415

    client = _client(kubeconfig)
    try:
        policies = [p.to_dict() for p in client.list(ClusterPolicyResource)]
        active = next((p for p in policies if (p.get("status") or {}).get("state") != "ignored"), None)
        ns = namespace or ((active or {}).get("status") or {}).get("namespace") or "gpu-operator"
        nodes = [n.to_dict() for n in client.list(Node, labels={keys.GPU_PRESENT: "true"})]
        pods = [p.to_dict() for p in client.list(Pod, namespace=ns)]
        events = _warnings(client, namespace=ns, node=node_name) if node_name else []
        shown = {n["metadata"]["name"] for n in nodes if node_name in (None, n["metadata"]["name"])}
        last_lines = _last_lines(client, namespace=ns, pods=[p for p in pods if _node_of(p) in shown])
    finally:
        client.close()
    reports = []
    off = disabled_steps(active)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:  # one pass: a thousand nodes' pods are not scanned once per node
        by_node.setdefault(_node_of(pod), []).append(pod)
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        mine_events = events if name == node_name else ()
        reports.append(
            explain_node(node, pods=by_node.get(name, []), events=mine_events, last_lines=last_lines, disabled=off)
        )
    return policies, reports


#: At most this many log reads per call: a table of thousands of stuck nodes stays one quick answer.
MAX_LOG_READS = 20


def _node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _last_lines(client: Any, *, namespace: str, pods: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """The last log line of each running init container (a validator's wait says what it waits on);
    none for a user who may not read pod logs."""
    from gpu_operator.kube.typed import ApiError  # noqa: PLC0415

    found: dict[tuple[str, str], str] = {}
    wanted = [(p["metadata"]["name"], c) for p in pods for c in running_init_containers(p)]
    for pod, container in wanted[:MAX_LOG_READS]:
        try:
            lines = list(client.log(pod, namespace=namespace, container=container, tail_lines=1))
        except ApiError:
            continue
        if lines and lines[-1].strip():
            found[(pod, container)] = lines[-1].strip()
    return found


@click.command("status")
@kubeconfig_option()
@click.option("--namespace", help="The operator namespace (default: from the ClusterPolicy's status).")
@click.option("--node", "node_name", help="Show the whole readiness chain of one node.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status_command(kubeconfig: str | None, namespace: str | None, node_name: str | None, output: str) -> None:
    """Explain the ClusterPolicy and every GPU node: what is ready and what each node waits for."""
    policies, reports = gather(kubeconfig=kubeconfig, namespace=namespace, node_name=node_name)
    chosen = operand_implementations(kubeconfig=kubeconfig, namespace=namespace, policies=policies)
    if node_name:
        reports = [r for r in reports if r.node == node_name]
        if not reports:
            raise click.ClickException(f"no GPU node named {node_name!r} (nodes with nvidia.com/gpu.present=true)")
    if output == "json":
        body = {
            "policies": [{"name": p["metadata"]["name"], "status": p.get("status") or {}} for p in policies],
            "nodes": [r.as_json() for r in reports],
            "implementations": chosen,
        }
        click.echo(json.dumps(body, indent=2, sort_keys=True))
        return
    console = Console(width=160)
    print_status(console=console, policies=policies, reports=reports, node_name=node_name)
    nvidia = [name for name, kind in chosen.items() if kind == "nvidia"]
    if nvidia and not node_name:
        console.print(f"NVIDIA's images (NVIDIA's contract): {', '.join(nvidia)}", markup=False, highlight=False)
    sys.stdout.flush()


def operand_implementations(
    *, kubeconfig: str | None, namespace: str | None, policies: list[dict[str, Any]]
) -> dict[str, str]:
    """The operand DaemonSets' implementations (``agent``/``nvidia``) in the policy's namespace."""
    from gpu_operator.kube.typed import DaemonSet  # noqa: PLC0415

    active = next((p for p in policies if (p.get("status") or {}).get("state") != "ignored"), None)
    ns = namespace or ((active or {}).get("status") or {}).get("namespace") or "gpu-operator"
    client = _client(kubeconfig)
    try:
        return implementations([d.to_dict() for d in client.list(DaemonSet, namespace=ns)])
    finally:
        client.close()


def print_status(
    *, console: Console, policies: list[dict[str, Any]], reports: list[NodeReport], node_name: str | None = None
) -> None:
    """The human-readable answer: each policy's state, then the node table (or one node's whole chain)."""
    for p in policies:
        status = p.get("status") or {}
        name, state = escape(str(p["metadata"]["name"])), escape(str(status.get("state", "unknown")))
        console.print(f"ClusterPolicy [bold]{name}[/bold]: {state}")
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True":
                console.print(f"  {cond['type']}: {cond.get('reason')}: {cond.get('message')}", markup=False)
        if upgrade_message := (status.get("driverUpgrade") or {}).get("message"):
            console.print(f"  driver upgrades: {upgrade_message}", markup=False, highlight=False)
        remediation = status.get("remediation") or {}
        if remediation.get("message"):
            console.print(f"  remediation: {remediation['message']}", markup=False, highlight=False)
        for node in remediation.get("nodes") or []:
            xid = f" after XID {node['xid']}" if node.get("xid") is not None else ""
            waits = f": {node['waiting']}" if node.get("waiting") else ""
            console.print(f"    {node.get('name')}: {node.get('action')}{xid}{waits}", markup=False, highlight=False)
    if not policies:
        console.print("no ClusterPolicy in this cluster")
    if node_name:
        (report,) = reports
        for step in report.steps:
            mark = "[green]done[/green]" if step.done else "[red]waiting[/red]"
            # soft_wrap: long pod and event messages stay one line each, whole for grep and copy.
            console.print(f"  {step.name:<18} {mark}  {escape(step.detail)}", soft_wrap=True)
            if step.event:
                console.print(f"  {'':<18}          event: {escape(step.event)}", highlight=False, soft_wrap=True)
        return
    table = Table(title="GPU nodes", title_justify="left")
    for column in ("node", "product", "GPUs", "driver", "upgrade", "MIG", "waiting on"):
        table.add_column(column)
    for r in reports:
        gpus = ", ".join(f"{k.removeprefix('nvidia.com/')}={v}" for k, v in sorted(r.allocatable.items())) or "0"
        mig = f"{r.mig_config} ({r.mig_state})" if r.mig_config else ""
        waiting = Text(r.blocking) if r.blocking else Text("ready", style="green")
        # Names and labels are the cluster's text, shown as they are (never rich markup).
        table.add_row(*(Text(str(c)) for c in (r.node, r.product, gpus, r.driver, r.upgrade_state, mig)), waiting)
    console.print(table)
