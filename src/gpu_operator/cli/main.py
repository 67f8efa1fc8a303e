"""Entry point of the ``gpu-operator`` command.

Each subcommand lives in its own module and is registered here; later issues add ``render``,
``operator``, ``agent NAME`` and ``status``.
"""

from __future__ import annotations

import click

from gpu_operator import __version__
from gpu_operator.cli.agent import agent_command
from gpu_operator.cli.api_commands import validate_command
from gpu_operator.cli.cluster import cluster_group
from gpu_operator.cli.crds import crds_command
from gpu_operator.cli.demo import demo_command
from gpu_operator.cli.network_operator import network_operator_command
from gpu_operator.cli.operator import operator_command
from gpu_operator.cli.render import render_command
from gpu_operator.cli.sim import sim_group
from gpu_operator.cli.status import status_command
from gpu_operator.cli.upgrade import upgrade_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpu-operator")
def cli() -> None:
    """A Kubernetes GPU operator, API-compatible with NVIDIA's GPU Operator."""


cli.add_command(crds_command)
cli.add_command(validate_command)
cli.add_command(cluster_group)
cli.add_command(demo_command)
cli.add_command(agent_command)
cli.add_command(sim_group)
cli.add_command(operator_command)
cli.add_command(network_operator_command)
cli.add_command(render_command)
cli.add_command(status_command)
cli.add_command(upgrade_group)


def main() -> None:
    """Console-script entry point."""
    cli()
