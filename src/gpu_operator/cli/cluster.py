"""``gpu-operator cluster``: run the embedded local control plane.

* ``up`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 and stays in
  the foreground until Ctrl-C; ``--detach`` leaves a supervisor process running instead (the components are
  its children and die with it).
* ``down`` stops the cluster recorded in the state directory; ``status`` shows it; ``kubeconfig`` prints
  the admin kubeconfig path (``export KUBECONFIG=$(gpu-operator cluster kubeconfig)``).

The state lives in ``~/.cache/gpu-operator/cluster/`` unless ``--state-dir`` says otherwise.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpu_operator.cli.inputs import check_regular_file
from gpu_operator.localcluster.binaries import CONTROL_PLANE, BinariesNotFoundError, KubeBinaries, locate_binaries
from gpu_operator.localcluster.cluster import DEFAULT_START_TIMEOUT, LocalCluster
from gpu_operator.localcluster.process import ProcessStartError
from gpu_operator.localcluster.state import (
    PHASE_FAILED,
    PHASE_READY,
    ClusterState,
    default_state_dir,
    live_state,
    process_alive,
    read_state,
    remove_state,
    terminate_owner,
)
from gpu_operator.localcluster.supervisor import SUPERVISOR_LOG, serve, spawn_detached, wait_until_settled
from gpu_operator.sim.fakedriver.nodes import node_setup
from gpu_operator.sim.hardware import pci_functions

#: The product image `make image` writes (relative to the working directory).
DEFAULT_IMAGE = Path("build/image/gpu-operator.oci.tar")

console = Console()
err_console = Console(stderr=True)

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the cluster's state file and data live (default: ~/.cache/gpu-operator/cluster).",
)


def _state_dir(value: Path | None) -> Path:
    return (value or default_state_dir()).expanduser().resolve()


def _binaries() -> KubeBinaries:
    try:
        return locate_binaries(required=CONTROL_PLANE)
    except BinariesNotFoundError as error:
        raise click.ClickException(str(error)) from error


def _summary(*, title: str, server: str, kubeconfig: str, state_dir: Path, seconds: float | None) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    # Paths and addresses are shown as they are: a directory named "[red]" is not rich markup.
    table.add_row("API server", Text(server))
    table.add_row("kubeconfig", Text(kubeconfig))
    table.add_row("state dir", Text(str(state_dir)))
    if seconds is not None:
        table.add_row("started in", f"{seconds:.1f} s")
    return table


@click.group(name="cluster")
def cluster_group() -> None:
    """Run the embedded local Kubernetes control plane (etcd, apiserver, controller-manager, scheduler)."""


@cluster_group.command(name="up")
@state_dir_option
@click.option("--detach", is_flag=True, help="Return once ready, leaving a supervisor process running.")
@click.option("--timeout", type=float, default=DEFAULT_START_TIMEOUT, show_default=True, help="Start timeout (s).")
@click.option(
    "--real-nodes",
    type=click.IntRange(0, 250),
    default=0,
    show_default=True,
    help="Real kubelet nodes (kubelet + containerd on this host, as root) to start beside the control plane.",
)
@click.option(
    "--image",
    "images",
    multiple=True,
    type=click.Path(path_type=Path),
    help=f"OCI archive to import into every real node (default: {DEFAULT_IMAGE} when it exists).",
)
@click.option(
    "--gpus",
    "gpu_profiles",
    default="",
    help="Comma-separated node profiles (e.g. dgx-h100,a100-mig), one per real node in order: that node "
    "gets the fake NVIDIA driver of the profile installed on its host, and its PCI tree shows the GPUs.",
)
def up_command(
    *,
    state_dir: Path | None,
    detach: bool,
    timeout: float,
    real_nodes: int,
    images: tuple[Path, ...],
    gpu_profiles: str,
) -> None:
    """Start a fresh local cluster.

    Stays in the foreground until Ctrl-C, unless --detach. With --real-nodes N, N real nodes
    (real-node-1 ... real-node-N) register and run pods; the product image from `make image` is
    imported into each. With --gpus, the first nodes get a fake NVIDIA driver on the host
    (`helm install` the chart with driver.enabled=false to run the GPU stack on them).
    """
    directory = _state_dir(state_dir)
    running = live_state(state_dir=directory)
    if running is not None:
        raise click.ClickException(
            f"a cluster is already running (pid {running.pid}, {running.server or 'starting'}); "
            f"stop it with `gpu-operator cluster down --state-dir {directory}`"
        )
    profiles = [p.strip() for p in gpu_profiles.split(",") if p.strip()]
    if len(profiles) > real_nodes:
        raise click.BadParameter(f"{len(profiles)} GPU profiles for {real_nodes} real nodes", param_hint="--gpus")
    if profiles and detach:
        raise click.UsageError("--gpus runs in the foreground only (the background supervisor cannot install it)")
    try:
        setups = [node_setup(profile=p) for p in profiles]
    except KeyError as error:
        raise click.BadParameter(str(error.args[0]), param_hint="--gpus") from error
    for image in images:
        check_regular_file(image)  # a FIFO or a device would hang the import into each node
    binaries = _binaries()
    node_images = list(images)
    if real_nodes and not node_images and DEFAULT_IMAGE.is_file():
        node_images = [DEFAULT_IMAGE.resolve()]
    if detach:
        _up_detached(
            state_dir=directory, binaries=binaries, timeout=timeout, real_nodes=real_nodes, node_images=node_images
        )
        return

    what = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
    spinner = console.status(f"Starting {what}" + (f" and {real_nodes} real nodes…" if real_nodes else "…"))

    def announce(cluster: LocalCluster) -> None:
        spinner.stop()
        console.print(
            _summary(
                title="Local cluster ready",
                server=cluster.server,
                kubeconfig=str(cluster.kubeconfig_path),
                state_dir=directory,
                seconds=cluster.timings.get("total"),
            )
        )
        console.print(f"Logs in [cyan]{escape(str(cluster.layout.log_dir))}[/]. Press [bold]Ctrl-C[/] to stop.")

    spinner.start()
    try:
        status = serve(
            state_dir=directory,
            binaries=binaries,
            detached=False,
            start_timeout=timeout,
            on_ready=announce,
            real_nodes=real_nodes,
            node_images=node_images,
            node_hardware=[pci_functions(p) for p in profiles],
            node_setups=setups,
        )
    except ProcessStartError as error:
        raise click.ClickException(str(error)) from error
    finally:
        spinner.stop()
    if status != 0:
        state = read_state(state_dir=directory)
        raise click.ClickException(state.error if state and state.error else "a component stopped")
    console.print("Cluster stopped.")


def _up_detached(
    *, state_dir: Path, binaries: KubeBinaries, timeout: float, real_nodes: int, node_images: list[Path]
) -> None:
    with console.status("Starting the cluster in the background…"):
        pid = spawn_detached(
            state_dir=state_dir,
            binaries=binaries,
            start_timeout=timeout,
            real_nodes=real_nodes,
            node_images=node_images,
        )
        state = wait_until_settled(state_dir=state_dir, pid=pid, timeout=timeout + 30)
    if state is None or state.phase != PHASE_READY:
        detail = state.error if state is not None and state.error else f"see {state_dir / SUPERVISOR_LOG}"
        if process_alive(pid):
            os.kill(pid, signal.SIGTERM)
        raise click.ClickException(f"the cluster did not start: {detail}")
    console.print(
        _summary(
            title=f"Local cluster ready (supervisor pid {state.pid})",
            server=state.server or "?",
            kubeconfig=state.kubeconfig or "?",
            state_dir=state_dir,
            seconds=state.start_seconds,
        )
    )
    console.print(f"Stop it with [bold]gpu-operator cluster down --state-dir {escape(str(state_dir))}[/].")


@cluster_group.command(name="down")
@state_dir_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds before SIGKILL.")
def down_command(state_dir: Path | None, timeout: float) -> None:
    """Stop the running cluster."""
    directory = _state_dir(state_dir)
    state = read_state(state_dir=directory)
    if state is None or not state.owner_alive():
        if state is not None:
            remove_state(state_dir=directory)
        console.print(f"No cluster is running (state dir {directory}).", markup=False)
        return
    with console.status(f"Stopping the cluster (pid {state.pid})…"):
        clean = terminate_owner(state=state, timeout=timeout)
    remove_state(state_dir=directory)
    console.print("Cluster stopped." if clean else "[yellow]Cluster killed[/] (it did not stop in time).")


@cluster_group.command(name="status")
@state_dir_option
def status_command(state_dir: Path | None) -> None:
    """Show the cluster's processes and logs.

    Exit status 1 when no cluster is running.
    """
    directory = _state_dir(state_dir)
    state = read_state(state_dir=directory)
    if state is None:
        console.print(f"No cluster (state dir {directory}).", markup=False)
        raise SystemExit(1)
    alive = state.owner_alive()
    console.print(_status_table(state=state, alive=alive, state_dir=directory))
    if state.error:
        err_console.print(f"[red]error:[/] {escape(state.error)}")
    if not alive or state.phase != PHASE_READY:
        raise SystemExit(1)


def _status_table(*, state: ClusterState, alive: bool, state_dir: Path) -> Table:
    phase = state.phase if alive or state.phase == PHASE_FAILED else "gone (stale state)"
    colour = "green" if alive and state.phase == PHASE_READY else "red"
    uptime = f"{time.time() - state.started_at:.0f} s" if alive else "-"
    table = Table(title=f"Local cluster: [{colour}]{phase}[/]", title_justify="left")
    for column in ("component", "pid", "running", "log"):
        table.add_column(column)
    table.add_row(
        "(owner)", str(state.pid), _yes_no(alive), Text(str(state_dir / SUPERVISOR_LOG) if state.detached else "")
    )
    for name, component in state.components.items():
        running = component.pid is not None and process_alive(component.pid)
        table.add_row(Text(name), str(component.pid or "-"), _yes_no(running), Text(component.log))
    table.caption = Text(f"server {state.server or '-'}  kubeconfig {state.kubeconfig or '-'}  uptime {uptime}")
    return table


def _yes_no(value: bool) -> str:
    return "[green]yes[/]" if value else "[red]no[/]"


@cluster_group.command(name="kubeconfig")
@state_dir_option
def kubeconfig_command(state_dir: Path | None) -> None:
    """Print the admin kubeconfig's path."""
    directory = _state_dir(state_dir)
    state = live_state(state_dir=directory)
    if state is None or state.kubeconfig is None:
        raise click.ClickException(f"no running cluster (state dir {directory}); start one with `cluster up`")
    click.echo(state.kubeconfig)
