"""Entry point of the ``gpu-operator`` command.

Each subcommand lives in its own module and is registered here. The group turns the failures a user
causes or can fix (a kubeconfig that is missing or wrong, an API server that cannot be reached, speaks
TLS it cannot verify or answers 401/403, a file that cannot be read) into one ``Error:`` line and exit
status 1, never a traceback; a bad option or argument is one ``Error:`` line too (exit status 2, without
the usage text around it); any other exception is a bug and surfaces as one.
"""

from __future__ import annotations

from typing import Any

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


class _OneLineUsageError(click.ClickException):
    """A usage error shown as its message alone, with the usage errors' exit status."""

    exit_code = 2


class _Cli(click.Group):
    """The command group, with one line for the known failures of any subcommand."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            # A bad option or argument: click would print the usage and a hint around it; the one line that
            # says which option and why is what a user (or a pod's log) needs.
            raise _OneLineUsageError(error.format_message()) from error
        except OSError as error:
            if not error.filename:
                raise  # no file to name: a traceback says more than "No such file or directory"
            # A file a command reads or writes (a certificate, a state directory): name it.
            raise click.ClickException(f"{error.filename}: {error.strerror or error}") from error
        except Exception as error:
            from gpu_operator.kube.errors import describe  # noqa: PLC0415 - the offline commands stay light

            line = describe(error)
            if line is None:
                raise
            raise click.ClickException(line) from error


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
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
