"""``gpu-operator network-operator``: run the Network Operator (what its Helm chart's Deployment executes).

Same image and flags as ``gpu-operator operator``: ``OPERATOR_NAMESPACE`` is mandatory, metrics on
:8080, probes on :8081, Lease-based leader election (upstream's ID ``12620820.mellanox.com``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import click

from gpu_operator.cli.logs import quiet_http_logs
from gpu_operator.reconcile.endpoints import serve
from gpu_operator.reconcile.network.metrics import NetworkMetrics
from gpu_operator.reconcile.network.operator import NetworkOperator
from gpu_operator.reconcile.network.policy import NetOutcome


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
    from gpu_operator.kube.connect import async_client  # noqa: PLC0415 - keep other commands light

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if log_level != "debug":
        quiet_http_logs()

    async def run() -> None:
        stop, ready = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        client = async_client()
        pod_name, pod_uid = os.environ.get("POD_NAME"), os.environ.get("POD_UID")
        op = NetworkOperator(client=client, namespace=namespace,
                             pod=(pod_name, pod_uid) if pod_name and pod_uid else None)  # fmt: skip
        metrics = NetworkMetrics(loops=op.metric_lines)
        servers = [
            await serve(address=address, metrics=metrics, healthy=lambda: op.healthy, ready=ready)
            for address in (metrics_bind_address, health_probe_bind_address)
        ]

        async def observed(outcome: NetOutcome) -> None:
            metrics.observe(outcome, kube=op.kube, upgrades=op.upgrades)
            ready.set()

        op.on_outcome = observed
        try:
            await op.run(stop=stop, leader_election=leader_elect)
        finally:
            for server in servers:
                server.close()
            await client.close()

    asyncio.run(run())
