"""``gpu-operator upgrade rollback``: return a rollout's canaries to the last good driver, by hand.

The canary stage (``upgradePolicy.canary``, docs/canary-rollouts.md) rolls back by itself with
``autoRollback``; without it a failed gate only halts the rollout, and an administrator may also want
to stop a rollout whose canaries are still soaking. This command asks the upgrade controller (the one
writer of the rollout ConfigMap) by annotating that ConfigMap; the controller takes the request on its
next pass: the reconciler renders the last good ``spec.driver`` again and only the canaries' drivers
are replaced. A rollout past its canary stage (other nodes run the new driver too) is refused:
change ``spec.driver`` back for that.
"""

from __future__ import annotations

import asyncio

import click

from gpu_operator.cli.inputs import kubeconfig_option
from gpu_operator.names import keys
from gpu_operator.upgrade import canary as c
from gpu_operator.upgrade.rollout import read_rollout


async def request_rollback(*, kubeconfig: str | None, namespace: str) -> str:
    """Annotate the rollout ConfigMap; returns what will happen (raises ClickException when it cannot)."""
    from gpu_operator.kube.api import Kube  # noqa: PLC0415 - keep other commands light
    from gpu_operator.kube.connect import async_client  # noqa: PLC0415

    client = async_client(kubeconfig=kubeconfig, field_manager=None)
    try:
        kube = Kube(client)
        rollout, current = await read_rollout(kube, namespace=namespace)
        if current is None:
            raise click.ClickException(
                f"no driver rollout recorded in {namespace} (ConfigMap {keys.DRIVER_ROLLOUT_CONFIGMAP})"
            )
        if rollout.phase == c.PROCEEDING:
            raise click.ClickException("the canaries passed and the rollout goes on: change spec.driver to go back")
        if rollout.phase not in c.ROLLBACK_FROM:
            state = rollout.phase or "idle"
            raise click.ClickException(
                f"the driver rollout is {state}: only one in its canary stage or halted can roll back"
            )
        if not rollout.good_driver:
            raise click.ClickException("no last good driver is recorded: there is nothing to roll back to")
        patch = {"metadata": {"annotations": {keys.DRIVER_ROLLBACK_REQUESTED: "true"}}}
        await kube.patch("v1", "ConfigMap", keys.DRIVER_ROLLOUT_CONFIGMAP, patch, namespace=namespace)
        return (f"rollback requested: canaries {', '.join(rollout.canaries)} return from driver "
                f"{rollout.target_version} to {rollout.good_version}")  # fmt: skip
    finally:
        await client.close()


@click.command("rollback")
@kubeconfig_option()
@click.option("--namespace", default="gpu-operator", show_default=True, help="The operator namespace.")
def rollback_command(*, kubeconfig: str | None, namespace: str) -> None:
    """Return the canaries of the ClusterPolicy's driver rollout to the last good driver."""
    click.echo(asyncio.run(request_rollback(kubeconfig=kubeconfig, namespace=namespace)))
