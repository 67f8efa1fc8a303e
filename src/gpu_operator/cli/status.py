"""``gpu-operator status``: the policy's state, then every GPU node and the first step it waits on.

Works against any cluster (``--kubeconfig`` or ``KUBECONFIG``): it reads only the ClusterPolicy, the
Nodes and the operand pods, so an administrator of a real cluster gets the same answer as the demo.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from gpu_operator.reconcile.explain import NodeReport, explain_node


def _client(kubeconfig: str | None) -> Any:
    from lightkube import Client, KubeConfig  # noqa: PLC0415 - keep other commands light

    return Client(config=KubeConfig.from_file(kubeconfig)) if kubeconfig else Client()


def gather(*, kubeconfig: str | None, namespace: str | None) -> tuple[list[dict[str, Any]], list[NodeReport]]:
    """ClusterPolicies (as dicts) and one report per GPU node."""
    from lightkube.resources.core_v1 import Node, Pod  # noqa: PLC0415

    from gpu_operator.kube.api import ClusterPolicyResource  # noqa: PLC0415

    client = _client(kubeconfig)
    try:
        policies = [p.to_dict() for p in client.list(ClusterPolicyResource)]
        active = next((p for p in policies if (p.get("status") or {}).get("state") != "ignored"), None)
        ns = namespace or ((active or {}).get("status") or {}).get("namespace") or "gpu-operator"
        nodes = [n.to_dict() for n in client.list(Node, labels={"nvidia.com/gpu.present": "true"})]
        pods = [p.to_dict() for p in client.list(Pod, namespace=ns)]
    finally:
        client.close()
    reports = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        mine = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]]
        reports.append(explain_node(node, pods=mine))
    return policies, reports


@click.command("status")
@click.option("--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig file (default: in-cluster or ~/.kube/config).")
@click.option("--namespace", help="The operator namespace (default: from the ClusterPolicy's status).")
@click.option("--node", "node_name", help="Show the whole readiness chain of one node.")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status_command(kubeconfig: str | None, namespace: str | None, node_name: str | None, output: str) -> None:
    """Explain the ClusterPolicy and every GPU node: what is ready and what each node waits for."""
    policies, reports = gather(kubeconfig=kubeconfig, namespace=namespace)
    if node_name:
        reports = [r for r in reports if r.node == node_name]
        if not reports:
            raise click.ClickException(f"no GPU node named {node_name!r} (nodes with nvidia.com/gpu.present=true)")
    if output == "json":
        body = {
            "policies": [{"name": p["metadata"]["name"], "status": p.get("status") or {}} for p in policies],
            "nodes": [r.as_json() for r in reports],
        }
        click.echo(json.dumps(body, indent=2, sort_keys=True))
        return
    console = Console(width=160)
    for p in policies:
        status = p.get("status") or {}
        console.print(f"ClusterPolicy [bold]{p['metadata']['name']}[/bold]: {status.get('state', 'unknown')}")
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True":
                console.print(f"  {cond['type']}: {cond.get('reason')}: {cond.get('message')}", markup=False)
    if not policies:
        console.print("no ClusterPolicy in this cluster")
    if node_name:
        (report,) = reports
        for step in report.steps:
            mark = "[green]done[/green]" if step.done else "[red]waiting[/red]"
            console.print(f"  {step.name:<18} {mark}  {step.detail}")
        return
    table = Table(title="GPU nodes", title_justify="left")
    for column in ("node", "product", "GPUs", "driver", "upgrade", "MIG", "waiting on"):
        table.add_column(column)
    for r in reports:
        gpus = ", ".join(f"{k.removeprefix('nvidia.com/')}={v}" for k, v in sorted(r.allocatable.items())) or "0"
        mig = f"{r.mig_config} ({r.mig_state})" if r.mig_config else ""
        table.add_row(r.node, r.product, gpus, r.driver, r.upgrade_state, mig, r.blocking or "[green]ready[/green]")
    console.print(table)
    sys.stdout.flush()
