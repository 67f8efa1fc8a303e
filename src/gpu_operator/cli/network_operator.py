"""``gpu-operator network-operator``: run the Network Operator (what its Helm chart's Deployment executes).

Same image and flags as ``gpu-operator operator``: ``OPERATOR_NAMESPACE`` is mandatory, metrics on
:8080, probes on :8081, Lease-based leader election (upstream's ID ``12620820.mellanox.com``).
"""

from __future__ import annotations

import asyncio
import os

import click

from gpu_operator.cli.operator import Process, pod_from_env, run_process
from gpu_operator.kube.typed import AsyncClient
from gpu_operator.reconcile.endpoints import Renders
from gpu_operator.reconcile.network.metrics import NetworkMetrics
from gpu_operator.reconcile.network.operator import NetworkOperator
from gpu_operator.reconcile.network.policy import NetOutcome
from gpu_operator.render.facts import OperatorSettings


@click.command("network-operator")
@click.option("--namespace", envvar="OPERATOR_NAMESPACE", required=True, help="The operator namespace.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True, help="Lease-based election.")
@click.option("--metrics-bind-address", default=":8080", show_default=True, help="host:port of /metrics.")
@click.option("--health-probe-bind-address", default=":8081", show_default=True, help="host:port of the probes.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
def network_operator_command(
    namespace: str, leader_elect: bool, metrics_bind_address: str, health_probe_bind_address: str, log_level: str
) -> None:
    """Reconcile NicClusterPolicies, NicNodePolicies and networks until SIGTERM."""

    def build(client: AsyncClient, ready: asyncio.Event) -> tuple[Process, Renders]:
        agent_image = OperatorSettings.from_env(os.environ).agent_image  # AGENT_IMAGE: our agents' image
        op = NetworkOperator(client=client, namespace=namespace, pod=pod_from_env(), agent_image=agent_image)
        metrics = NetworkMetrics(loops=op.metric_lines)

        async def observed(outcome: NetOutcome) -> None:
            metrics.observe(outcome, kube=op.kube, upgrades=op.upgrades)
            ready.set()

        op.on_outcome = observed
        return op, metrics

    run_process(log_level=log_level, addresses=(metrics_bind_address, health_probe_bind_address),
                leader_elect=leader_elect, build=build)  # fmt: skip
