"""``gpu-operator upgrade plan``: a dry-run preview of a driver rollout, before anything changes.

From the live cluster (``--kubeconfig`` or ``KUBECONFIG``) and, with ``--policy FILE``, a proposed
ClusterPolicy (``upgrade.proposal`` asks the API server, as a dry run, which driver pods the change
would put out of date), it prints the waves in which nodes will be upgraded, the pods each node will
evict or wait for, what blocks (PodDisruptionBudgets, skip labels, cordoned or unready nodes, images
that cannot be pulled), and an estimated duration from the install time measured on the current
driver pods. The same pure ``plan()`` the operator runs produces it. ``-o json`` for machines. The
proposed policy is read through :mod:`gpu_operator.cli.inputs` and validated offline, as ``gpu-operator
validate`` would, before anything is asked of the cluster: an invalid one never reaches the API server.

``--driver ofed`` previews the Network Operator's OFED driver instead: its NicClusterPolicy's rollout
(or a NicNodePolicy's, ``--node-policy NAME``), a proposed NicClusterPolicy or NicNodePolicy with
``--policy``, in the Network Operator's namespace by default.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpu_operator.api.validation import validate_document
from gpu_operator.cli.inputs import kubeconfig_option, read_documents
from gpu_operator.cli.rollback import rollback_command
from gpu_operator.names import network
from gpu_operator.upgrade.drivers import CLUSTER_POLICY, DRIVERS, GPU_DRIVER, OFED_DRIVER
from gpu_operator.upgrade.preview import Preview, preview
from gpu_operator.upgrade.proposal import Proposal, build_proposal

#: The namespace each driver's operator runs in by default (the charts' defaults).
NAMESPACES = {GPU_DRIVER: "gpu-operator", OFED_DRIVER: "nvidia-network-operator"}
#: The kinds ``--policy`` takes for each driver.
POLICY_KINDS = {GPU_DRIVER: ("ClusterPolicy",), OFED_DRIVER: (network.NCP_KIND, network.NNP_KIND)}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _at(proposal: Proposal, seconds: float) -> str:
    """When a wave starts as a wall-clock time: in the maintenance windows' zone, else UTC."""
    zone = proposal.knobs.windows.zone if proposal.knobs.windows else dt.UTC
    return dt.datetime.fromtimestamp(proposal.snapshot.now + seconds, zone).isoformat(timespec="minutes")


def to_json(result: Preview, proposal: Proposal) -> dict[str, Any]:
    knobs = result.knobs
    return {
        "driver": proposal.snapshot.keys.driver,
        "autoUpgrade": knobs.auto_upgrade,
        "maxParallelUpgrades": knobs.max_parallel,
        "maxUnavailable": knobs.max_unavailable,
        "installSeconds": result.install_seconds,
        "installSecondsMeasured": proposal.measured,
        "validationSeconds": proposal.validation_seconds,
        "estimatedSeconds": result.estimated_seconds,
        "maintenanceWindows": knobs.windows.summary() if knobs.windows else None,
        "canary": _canary_json(result),
        "waves": [
            {
                "index": w.index,
                "startSeconds": w.start_seconds,
                "startsAt": _at(proposal, w.start_seconds),
                "nodes": list(w.nodes),
            }
            for w in result.waves
        ],
        "nodes": [
            {
                "node": f.node,
                "version": f.version,
                "targetVersion": f.target_version,
                "wave": f.wave,
                "restartOnly": f.fast_path,
                "evicts": f.evict,
                "waitsFor": f.wait_for,
                "blockers": f.blockers,
                "outcome": f.outcome,
            }
            for f in result.nodes
        ],
        "notes": proposal.notes,
    }


def _canary_json(result: Preview) -> dict[str, Any] | None:
    canary = result.knobs.canary
    if canary is None:
        return None
    return {
        "nodes": list(result.canaries),
        "soakSeconds": canary.soak_seconds,
        "othersStartAfterSeconds": result.proceeds_seconds,
        "gates": {
            "validator": True,
            "noNewXids": canary.xid_gate,
            "exporterReady": canary.exporter_gate,
            "probe": dict(canary.probe) if canary.probe else None,
        },
        "autoRollback": canary.auto_rollback,
        "halts": result.halted or None,
    }


def _canary_line(result: Preview) -> str:
    canary = result.knobs.canary
    assert canary is not None
    gates = ["validator", *(["no new XID"] if canary.xid_gate else []), *(["exporter Ready"] if canary.exporter_gate
             else []), *(["probe Job"] if canary.probe else [])]  # fmt: skip
    line = (f"Canary stage: {escape(', '.join(result.canaries)) or 'no node to take'} first, then a soak of "
            f"{_duration(canary.soak_seconds)} under the gates ({', '.join(gates)})")  # fmt: skip
    if result.halted:
        return f"{line}; [red]{escape(result.halted)}: the rollout halts there[/red]" + (
            " and rolls the canaries back" if canary.auto_rollback else ""
        )
    if result.proceeds_seconds is not None:
        line += f"; the other nodes start after {_duration(result.proceeds_seconds)}"
    return line + ("; a failed gate rolls the canaries back" if canary.auto_rollback else "; a failed gate halts")


def print_preview(console: Console, result: Preview, proposal: Proposal) -> None:
    moving = [f for f in result.nodes if f.wave is not None]
    knobs = result.knobs
    source = "measured on the current driver pods" if proposal.measured else "assumed: no driver pod to measure"
    title = "Driver upgrade preview" if proposal.snapshot.keys.driver == GPU_DRIVER else "OFED driver upgrade preview"
    console.print(
        f"[bold]{title}[/bold]: {len(moving)} of {len(result.nodes)} node(s) in "
        f"{len(result.waves)} wave(s) (maxParallelUpgrades={knobs.max_parallel or 'unlimited'}, "
        f"maxUnavailable={escape(str(knobs.max_unavailable))}); estimated {_duration(result.estimated_seconds)} "
        f"at {_duration(result.install_seconds)} install + {_duration(proposal.validation_seconds)} validation "
        f"per node ({source})"
    )
    if knobs.windows is not None:
        console.print(f"Nodes start only inside the maintenance windows: {escape(knobs.windows.summary())}")
    if knobs.canary is not None:
        console.print(_canary_line(result))
    waves = Table(title="Waves")
    for column in ("wave", "starts after", "starts at", "nodes"):
        waves.add_column(column)
    for wave in result.waves:
        waves.add_row(str(wave.index), _duration(wave.start_seconds), _at(proposal, wave.start_seconds),
                      Text(", ".join(wave.nodes)))  # fmt: skip
    console.print(waves)
    nodes = Table(title="Nodes")
    for column in ("node", "driver", "wave", "evicts", "waits for", "outcome / blockers"):
        nodes.add_column(column)
    for f in result.nodes:
        change = f"{f.version} -> {f.target_version}" if f.version != f.target_version else f.version
        if f.fast_path and f.wave is not None:
            change += " (restart only)"
        outcome = f.outcome if not f.blockers else f"{f.outcome}: " + "; ".join(f.blockers)
        # Node, pod and version names are the cluster's text, shown as they are (never rich markup).
        cells = (f.node, change, str(f.wave or "-"), ", ".join(f.evict) or "-", "; ".join(f.wait_for) or "-", outcome)
        nodes.add_row(*(Text(str(cell)) for cell in cells))
    console.print(nodes)
    for note in proposal.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")


async def fetch_proposal(
    *,
    kubeconfig: str | None,
    namespace: str,
    policy: dict[str, Any] | None,
    driver: str = GPU_DRIVER,
    node_policy: str | None = None,
) -> Proposal:
    from gpu_operator.kube.api import Kube  # noqa: PLC0415 - keep other commands light
    from gpu_operator.kube.connect import async_client  # noqa: PLC0415

    client = async_client(kubeconfig=kubeconfig, field_manager=None)
    try:
        if driver == OFED_DRIVER:
            from gpu_operator.upgrade.ofed_proposal import build_ofed_proposal  # noqa: PLC0415

            partition = node_policy or CLUSTER_POLICY
            return await build_ofed_proposal(Kube(client), namespace=namespace, policy_doc=policy, partition=partition)
        return await build_proposal(Kube(client), namespace=namespace, policy_doc=policy)
    finally:
        await client.close()


def _policy(path: Path | None, *, driver: str = GPU_DRIVER) -> dict[str, Any] | None:
    """The proposed policy in ``path``, validated offline: nothing unchecked is sent to the cluster."""
    if path is None:
        return None
    kinds = POLICY_KINDS[driver]
    docs = [d for d in read_documents(path) if isinstance(d, dict) and d.get("kind") in kinds]
    if len(docs) != 1:
        raise click.ClickException(f"{path}: expected one {' or '.join(kinds)}, found {len(docs)}")
    result = validate_document(docs[0], source=str(path))
    if not result.ok:
        # One line per field, as ``gpu-operator validate`` prints them.
        for error in result.errors:
            click.echo(f"error: {result.source}: {result.kind} {result.name}: {error}", err=True)
        raise SystemExit(1)
    return docs[0]


@click.group("upgrade")
def upgrade_group() -> None:
    """Rolling driver upgrades."""


@upgrade_group.command("plan")
@kubeconfig_option()
@click.option("--namespace", help="The operator namespace (default: gpu-operator; nvidia-network-operator for ofed).")
@click.option("--driver", type=click.Choice(DRIVERS), default=GPU_DRIVER, show_default=True,
              help="The driver: the GPU driver, or the Network Operator's OFED driver.")  # fmt: skip
@click.option("--policy", "policy_file", type=click.Path(path_type=Path),
              help="A proposed ClusterPolicy (ofed: NicClusterPolicy or NicNodePolicy); "
                   "without it, the rollout the live policy implies.")  # fmt: skip
@click.option("--node-policy", help="ofed: preview this live NicNodePolicy's nodes instead of the NicClusterPolicy's.")
@click.option("--install-seconds", type=float, help="Time per node install (default: measured on the cluster).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plan_command(
    *,
    kubeconfig: str | None,
    namespace: str | None,
    driver: str,
    policy_file: Path | None,
    node_policy: str | None,
    install_seconds: float | None,
    output: str,
) -> None:
    """Preview the driver rollout: waves, evictions, waits, blockers and duration. Changes nothing."""
    if node_policy and driver != OFED_DRIVER:
        raise click.UsageError("--node-policy is for --driver ofed")
    if node_policy and policy_file:
        raise click.UsageError("--node-policy previews a live policy; a proposed one names itself (--policy)")
    namespace = namespace or NAMESPACES[driver]
    policy = _policy(policy_file, driver=driver)
    try:
        proposal = asyncio.run(
            fetch_proposal(kubeconfig=kubeconfig, namespace=namespace, policy=policy, driver=driver,
                           node_policy=node_policy)
        )  # fmt: skip
    except ValueError as error:  # an invalid policy: pydantic's message names the fields
        live = "the live ClusterPolicy" if driver == GPU_DRIVER else "the live Network Operator policies"
        raise click.ClickException(f"{policy_file or live}: {error}") from error
    if install_seconds is not None:
        proposal.install_seconds, proposal.measured = install_seconds, False
    result = preview(
        proposal.snapshot,
        proposal.knobs,
        install_seconds=proposal.install_seconds,
        validation_seconds=proposal.validation_seconds,
    )
    if output == "json":
        click.echo(json.dumps(to_json(result, proposal), indent=2))
    else:
        print_preview(Console(), result, proposal)


upgrade_group.add_command(rollback_command)
