"""``gpu-operator demo``: the command; the story itself is the ``gpu_operator.demo`` package."""

from __future__ import annotations

import click
from rich.console import Console

from gpu_operator.demo.network import run_network_demo
from gpu_operator.demo.real import run_real_demo
from gpu_operator.demo.simulated import DEFAULT_NODES, WIDE, run_demo
from gpu_operator.sim.shapes import parse_node_spec


@click.command("demo")
@click.option("--no-interactive", is_flag=True, help="Run every step to completion and exit (for tests and CI).")
@click.option("--nodes", default=DEFAULT_NODES, show_default=True, help="Simulated nodes: PROFILE:COUNT,...")
@click.option("--in-process", is_flag=True, help="Run the operator in a thread instead of installing the chart.")
@click.option(
    "--real-nodes",
    is_flag=True,
    help="Run the story on two real kubelet nodes with the fake NVIDIA driver instead (root; see demo.real).",
)
@click.option(
    "--network",
    is_flag=True,
    help="Show GPUDirect RDMA instead: the Network Operator beside the GPU operator on a DGX node with ConnectX NICs.",
)
def demo_command(*, no_interactive: bool, nodes: str, in_process: bool, real_nodes: bool, network: bool) -> None:
    """Show the GPU operator working on an embedded local cluster with simulated GPU nodes."""
    try:
        parse_node_spec(nodes)  # checked before a control plane is started for it
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--nodes") from error
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, WIDE)  # a log or a test capture: keep the node table readable
    if network:
        run_network_demo(console=console, interactive=not no_interactive)
        return
    if real_nodes:
        run_real_demo(console=console, interactive=not no_interactive)
        return
    run_demo(console=console, interactive=not no_interactive, nodes=nodes, in_process=in_process)
