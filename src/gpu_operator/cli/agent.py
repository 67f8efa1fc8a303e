"""``gpu-operator agent NAME``: run one node agent in this container (what operand pods execute).

The same programs run in-process on simulated nodes; here they get a :class:`HostContext`. An agent that
fails with a one-line reason (a refused config, a check that gave up) exits 1 with that line in its log
and in ``/dev/termination-log``, the kubelet's default termination message path, so the pod's status says
why (``kubectl describe``, and the upgrade controller's failure reason).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from gpu_operator.agents.host import HostContext
from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.agents.runtime import AgentFailedError
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.cli.logs import quiet_http_logs
from gpu_operator.gpu import open_backend
from gpu_operator.kube.nodeaccess import LightkubeNode
from gpu_operator.kube.nodecluster import LightkubeCluster

TERMINATION_LOG = Path("/dev/termination-log")


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
    except (ConfigRefusedError, AgentFailedError) as error:
        # A config, file or environment value the agent refuses, or a check that gave up: its one line says
        # which and why; a traceback would only bury it in the pod's log.
        message = f"agent {name}: {error}"
        write_termination_message(message)
        raise click.ClickException(message) from error
    finally:
        backend.close()


def write_termination_message(message: str, *, path: Path | None = None) -> None:
    """Where the kubelet mounted a termination log (in a container), the reason this agent exits; nowhere
    else (a run outside a container has none, and creating /dev files is not ours to do)."""
    path = path or TERMINATION_LOG
    if path.is_file():
        try:
            path.write_text(message[:4096], encoding="utf-8")  # the kubelet keeps at most 4 KiB
        except OSError as error:
            logging.getLogger(__name__).warning("could not write %s: %s", path, error)
