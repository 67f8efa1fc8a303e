"""``gpu-operator agent NAME``: run one node agent in this container (what operand pods execute).

The same programs run in-process on simulated nodes; here they get a :class:`HostContext`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import click

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.drivermanager import driver as driver_program
from gpu_operator.agents.drivermanager import manager as driver_manager
from gpu_operator.agents.drivermanager.kubeclients import LightkubeCluster
from gpu_operator.agents.exporter import program as exporter
from gpu_operator.agents.gfd import program as feature_discovery
from gpu_operator.agents.host import HostContext, LightkubeNode
from gpu_operator.agents.migmanager import program as mig_manager
from gpu_operator.agents.nodestatus import program as node_status_exporter
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.toolkit import program as toolkit
from gpu_operator.agents.validator import program as validator
from gpu_operator.gpu import open_backend


async def sleep_program(ctx: AgentContext) -> None:
    """The validator DaemonSet's main container: ready, idle until stopped (upstream sleeps too)."""
    ctx.set_ready(True)
    while not await ctx.sleep(3600):
        pass


PROGRAMS: dict[str, Callable[[AgentContext], Awaitable[None]]] = {
    "sleep": sleep_program,
    "device-plugin": device_plugin.main,
    "feature-discovery": feature_discovery.main,
    "exporter": exporter.main,
    "validator": validator.main,
    "node-status-exporter": node_status_exporter.main,
    "toolkit": toolkit.main,
    "mig-manager": mig_manager.main,
    "driver-manager": driver_manager.main,
    "driver": driver_program.main,
}


@click.command("agent", context_settings={"ignore_unknown_options": True})
@click.argument("name", type=click.Choice(sorted(PROGRAMS)))
@click.option("--gpu-backend", default="auto", show_default=True, help="nvml, simulated, null or auto.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def agent_command(name: str, gpu_backend: str, verbose: bool) -> None:
    """Run the node agent NAME until SIGTERM."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    backend = open_backend(gpu_backend)

    async def run() -> None:
        ctx = HostContext(gpu=backend)
        if ctx.node_name:
            ctx.node = LightkubeNode(name=ctx.node_name)
            ctx.cluster = LightkubeCluster(node_name=ctx.node_name)
        ctx.install_signal_handlers()
        await PROGRAMS[name](ctx)

    try:
        asyncio.run(run())
    finally:
        backend.close()
