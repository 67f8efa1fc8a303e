"""Entry point of the ``gpu-operator`` command.

Each subcommand lives in its own module and is registered here. The group turns the failures a user
causes or can fix (a kubeconfig that is missing or wrong, an API server that cannot be reached, speaks
TLS it cannot verify or answers 401/403, a file that cannot be read) into one ``Error:`` line and exit
status 1, never a traceback; a bad option or argument is one ``Error:`` line too (exit status 2, without
the usage text around it); any other exception is a bug and surfaces as one.

Subcommands are imported when run, not when the command starts: every container of every operand pod
runs ``gpu-operator agent NAME``, and importing the operator, the renderer and the demos with it cost
about a second of CPU per container start (1.6 s of imports against 0.5 s for an agent alone).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from gpu_operator import __version__

#: Each subcommand's name -> "module:attribute" of its click command, loaded when it is run or listed.
SUBCOMMANDS = {
    "crds": "gpu_operator.cli.crds:crds_command",
    "validate": "gpu_operator.cli.api_commands:validate_command",
    "cluster": "gpu_operator.cli.cluster:cluster_group",
    "demo": "gpu_operator.cli.demo:demo_command",
    "agent": "gpu_operator.cli.agent:agent_command",
    "sim": "gpu_operator.cli.sim:sim_group",
    "operator": "gpu_operator.cli.operator:operator_command",
    "network-operator": "gpu_operator.cli.network_operator:network_operator_command",
    "render": "gpu_operator.cli.render:render_command",
    "status": "gpu_operator.cli.status:status_command",
    "upgrade": "gpu_operator.cli.upgrade:upgrade_group",
}


class _OneLineUsageError(click.ClickException):
    """A usage error shown as its message alone, with the usage errors' exit status."""

    exit_code = 2


class _Cli(click.Group):
    """The command group, with one line for the known failures of any subcommand; subcommands load lazily."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            module, _, attribute = SUBCOMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise RuntimeError(f"{SUBCOMMANDS[cmd_name]} is not the click command {cmd_name!r}")
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

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


def main() -> None:
    """Console-script entry point."""
    cli()
