"""``gpu-operator agent NAME``: run one node agent in this container (what operand pods execute).

The same programs run in-process on simulated nodes; here they get a :class:`HostContext`.
"""

from __future__ import annotations

import asyncio
import logging

import click

from gpu_operator.agents.host import HostContext
from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.cli.logs import quiet_http_logs
from gpu_operator.gpu import open_backend
from gpu_operator.kube.nodeaccess import LightkubeNode
from gpu_operator.kube.nodecluster import LightkubeCluster


@click.command("agent", context_settings={"ignore_unknown_options": True})
@click.argument("name", type=click.Choice(sorted(PROGRAMS)))
@click.option("--gpu-backend", default="auto", show_default=True, help="nvml, simulated, null or auto.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def agent_command(name: str, gpu_backend: str, verbose: bool) -> None:
    """Run the node agent NAME until SIGTERM."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not verbose:
        quiet_http_logs()
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
    except ConfigRefusedError as error:
        # A config, file or environment value the agent refuses: its one line says which and why; a traceback
        # would only bury it in the pod's log.
        raise click.ClickException(f"agent {name}: {error}") from error
    finally:
        backend.close()
