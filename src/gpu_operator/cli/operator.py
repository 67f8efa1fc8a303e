"""``gpu-operator operator``: run the operator (what the Helm chart's Deployment executes).

``OPERATOR_NAMESPACE`` is mandatory, as upstream; the API is reached in-cluster or through
``KUBECONFIG``. ``--no-leader-elect`` is for running a single copy by hand.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import click

from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings


@click.command("operator")
@click.option("--namespace", envvar="OPERATOR_NAMESPACE", required=True, help="The operator namespace.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True, help="Lease-based election.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def operator_command(namespace: str, leader_elect: bool, verbose: bool) -> None:
    """Reconcile ClusterPolicies into operands until SIGTERM."""
    from lightkube import AsyncClient  # noqa: PLC0415 - keep other commands light

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        client = AsyncClient(field_manager="gpu-operator")
        try:
            op = Operator(client=client, namespace=namespace, settings=OperatorSettings.from_env(os.environ))
            await op.run(stop=stop, leader_election=leader_elect)
        finally:
            await client.close()

    asyncio.run(run())
