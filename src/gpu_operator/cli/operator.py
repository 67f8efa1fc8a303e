"""``gpu-operator operator``: run the operator (what the Helm chart's Deployment executes).

``OPERATOR_NAMESPACE`` is mandatory, as upstream; the API is reached in-cluster or through
``KUBECONFIG``. Flags follow upstream's (metrics :8080, probes :8081, leader election and its
``--leader-lease-renew-deadline``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from typing import Protocol

import click

from gpu_operator.api.envtext import env_duration
from gpu_operator.api.jsontext import ConfigRefusedError
from gpu_operator.cli.logs import quiet_http_logs
from gpu_operator.kube.typed import AsyncClient
from gpu_operator.reconcile.clusterpolicy import Outcome
from gpu_operator.reconcile.endpoints import OperatorMetrics, Renders, serve
from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings
from gpu_operator.runtime.leader import MAX_RENEW_DEADLINE, MIN_RENEW_DEADLINE, LeaseTiming


class Process(Protocol):
    """An operator process: the GPU operator's or the network operator's."""

    @property
    def healthy(self) -> bool: ...

    async def run(self, *, stop: asyncio.Event, leader_election: bool) -> None: ...


def pod_from_env() -> tuple[str, str] | None:
    """The operator's own pod (name, uid) from the chart's downward-API variables, if it runs in one."""
    name, uid = os.environ.get("POD_NAME"), os.environ.get("POD_UID")
    return (name, uid) if name and uid else None


def run_process(
    *, log_level: str, addresses: Sequence[str], leader_elect: bool,
    build: Callable[[AsyncClient, asyncio.Event], tuple[Process, Renders]],
) -> None:  # fmt: skip
    """Run an operator until SIGTERM: ``build(client, ready)`` makes it and its metrics (setting
    ``ready`` after a first pass); probes and metrics are served on ``addresses``."""
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
        op, metrics = build(client, ready)
        servers = [
            await serve(address=address, metrics=metrics, healthy=lambda: op.healthy, ready=ready)
            for address in addresses
        ]
        try:
            await op.run(stop=stop, leader_election=leader_elect)
        finally:
            for server in servers:
                server.close()
            await client.close()

    asyncio.run(run())


def _renew_deadline(_ctx: click.Context, param: click.Parameter, value: str) -> LeaseTiming:
    if not value:
        return LeaseTiming()
    flag = f"--{(param.name or '').replace('_', '-')}"
    try:
        seconds = env_duration({flag: value}, flag, default=0.0, minimum=MIN_RENEW_DEADLINE,
                               maximum=MAX_RENEW_DEADLINE, bare_seconds=False)  # fmt: skip
    except ConfigRefusedError as error:
        raise click.BadParameter(str(error)) from error
    assert seconds is not None  # no special words: a value or a refusal
    return LeaseTiming.from_renew_deadline(seconds)


@click.command("operator")
@click.option("--namespace", envvar="OPERATOR_NAMESPACE", required=True, help="The operator namespace.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True, help="Lease-based election.")
@click.option("--metrics-bind-address", default=":8080", show_default=True, help="host:port of /metrics.")
@click.option("--health-probe-bind-address", default=":8081", show_default=True, help="host:port of the probes.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option(
    "--leader-lease-renew-deadline", default="", callback=_renew_deadline, metavar="DURATION",
    help="Upstream's flag: a leader that could not renew its Lease this long (a Go duration, e.g. 10s) stops "
    "acting; the Lease lasts 5 s longer. Unset: a 15 s Lease renewed every 5 s.",
)  # fmt: skip
def operator_command(
    *, namespace: str, leader_elect: bool, metrics_bind_address: str, health_probe_bind_address: str, log_level: str,
    leader_lease_renew_deadline: LeaseTiming,
) -> None:  # fmt: skip
    """Reconcile ClusterPolicies into operands until SIGTERM."""

    def build(client: AsyncClient, ready: asyncio.Event) -> tuple[Process, Renders]:
        op = Operator(client=client, namespace=namespace, settings=OperatorSettings.from_env(os.environ),
                      pod=pod_from_env(), lease_timing=leader_lease_renew_deadline)  # fmt: skip
        metrics = OperatorMetrics(loops=op.metric_lines)

        async def observed(outcome: Outcome) -> None:
            metrics.observe(outcome, api_requests=op.api_requests, upgrades=op.upgrades, kube=op.kube)
            ready.set()

        op.on_outcome = observed
        return op, metrics

    run_process(log_level=log_level, addresses=(metrics_bind_address, health_probe_bind_address),
                leader_elect=leader_elect, build=build)  # fmt: skip
