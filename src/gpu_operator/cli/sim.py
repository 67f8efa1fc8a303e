"""``gpu-operator sim``: simulated GPU nodes on a running cluster.

* ``up --nodes dgx-h100:2,cpu-only:1`` registers Ready nodes that act as kubelets (they run the pods bound
  to them as in-process programs) and stays in the foreground until Ctrl-C, then removes them. The cluster
  is ``--kubeconfig``, else the one ``gpu-operator cluster up`` runs. ``--nic-nodes N`` adds N nodes with
  Mellanox NICs for the network operator, split over OS/kernel pools (``--nic-pool``, two by default).
* ``status`` lists the running simulator's nodes; ``fault ...`` injects faults into them through the
  control socket in the simulator's state directory (``~/.cache/gpu-operator/sim`` by default).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpu_operator.cli.fakedriver import fake_driver_group
from gpu_operator.cli.inputs import check_kubeconfig
from gpu_operator.cli.logs import quiet_http_logs
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.localcluster.state import default_state_dir as cluster_state_dir
from gpu_operator.localcluster.state import live_state, process_start_time
from gpu_operator.sim.control.server import (
    SOCKET_FILE,
    STATE_FILE,
    ControlError,
    SimState,
    default_state_dir,
    node_rows,
    read_state,
    request,
    write_state,
)
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.node import GPU_PLUGIN_MODES, NodeOptions
from gpu_operator.sim.nics import DEFAULT_NIC_MODEL, NIC_MODELS, NIC_POOLS, NicRequest, OsPool, parse_os_pool
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.shapes import NodeRequest, nic_node_requests, parse_node_spec

console = Console()
state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The simulator's state directory (default: ~/.cache/gpu-operator/sim).",
)


def _state_dir(value: Path | None) -> Path:
    return (value or default_state_dir()).expanduser().resolve()


def _kubeconfig(kubeconfig: Path | None, cluster_dir: Path | None) -> Path:
    if kubeconfig is not None:
        check_kubeconfig(kubeconfig)  # a FIFO or /dev/zero would hang the reader: refuse it first
        return kubeconfig
    state = live_state(state_dir=(cluster_dir or cluster_state_dir()).expanduser().resolve())
    if state is None or state.kubeconfig is None:
        raise click.ClickException(
            "no cluster: pass --kubeconfig, or start one with `gpu-operator cluster up --detach`"
        )
    return Path(state.kubeconfig)


@click.group(name="sim")
def sim_group() -> None:
    """Simulated GPU nodes that run the operator's agents against simulated GPUs."""


sim_group.add_command(fake_driver_group)


def _parse_pools(values: tuple[str, ...]) -> tuple[OsPool, ...]:
    try:
        return tuple(parse_os_pool(v) for v in values) or NIC_POOLS
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--nic-pool") from error


def up_requests(
    *, spec: str, nic_nodes: int, nic_profile: str, nic_model: str, nic_pools: tuple[str, ...]
) -> list[NodeRequest]:
    """What ``up`` registers: the --nodes spec, then the NIC nodes; usage errors name the option."""
    if not spec and nic_nodes <= 0:
        raise click.UsageError("nothing to add: pass --nodes and/or --nic-nodes")
    try:
        requests = parse_node_spec(spec) if spec else []
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--nodes") from error
    if nic_nodes > 0:
        pools = _parse_pools(nic_pools)
        try:
            requests += nic_node_requests(nic_nodes, profile=nic_profile, nics=NicRequest(model=nic_model), pools=pools)
        except (KeyError, ValueError) as error:
            raise click.BadParameter(str(error), param_hint="--nic-profile") from error
    return requests


@sim_group.command(name="up")
@click.option("--nodes", "spec", default="", help="PROFILE[:COUNT],... e.g. dgx-h100:2,a100-mig:1,cpu-only:1")
@click.option(
    "--nic-nodes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Nodes with Mellanox NICs (for the network operator), split evenly over the --nic-pool pools.",
)
@click.option(
    "--nic-profile",
    default="cpu-only",
    show_default=True,
    help="Node profile of the NIC nodes (one with GPUs gives GPU nodes with NICs).",
)
@click.option(
    "--nic-model",
    type=click.Choice(sorted(NIC_MODELS)),
    default=DEFAULT_NIC_MODEL,
    show_default=True,
    help="The NIC nodes' Mellanox NIC model (2 per node).",
)
@click.option(
    "--nic-pool",
    "nic_pools",
    multiple=True,
    help="An OS pool of the NIC nodes, ID:VERSION_ID:KERNEL (repeatable; default: "
    + ", ".join(str(p) for p in NIC_POOLS)
    + ").",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The cluster's kubeconfig (default: the cluster `gpu-operator cluster up` runs).",
)
@click.option(
    "--cluster-state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State dir of `gpu-operator cluster up` (used without --kubeconfig).",
)
@click.option(
    "--gpu-plugin",
    type=click.Choice(GPU_PLUGIN_MODES),
    default="none",
    show_default=True,
    help="The simulator's own nvidia.com/gpu plugin (none: the operator's device plugin provides it).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulated GPUs.")
@click.option(
    "--name-prefix",
    default="sim",
    show_default=True,
    help="Nodes are named PREFIX-PROFILE-N (NIC nodes PREFIX-PROFILE-MODEL-N).",
)
@state_dir_option
def up_command(
    *,
    spec: str,
    nic_nodes: int,
    nic_profile: str,
    nic_model: str,
    nic_pools: tuple[str, ...],
    name_prefix: str,
    kubeconfig: Path | None,
    cluster_state_dir: Path | None,
    gpu_plugin: str,
    seed: int,
    state_dir: Path | None,
) -> None:
    """Add simulated nodes to a running cluster; Ctrl-C removes them.

    Pods bound to them whose command is `gpu-operator agent NAME` run in this process (the node agents and
    the test programs sleep, fail, ready-after), as do stand-ins for NVIDIA's and the network operator's
    containers (chosen by container name); anything else waits with reason UnknownProgram.
    """
    directory = _state_dir(state_dir)
    running = read_state(state_dir=directory)
    if running is not None and running.alive():
        raise click.ClickException(f"a simulator already runs with state dir {directory} (pid {running.pid})")
    requests = up_requests(
        spec=spec, nic_nodes=nic_nodes, nic_profile=nic_profile, nic_model=nic_model, nic_pools=nic_pools
    )
    access = ClusterAccess.from_kubeconfig(_kubeconfig(kubeconfig, cluster_state_dir))
    quiet_http_logs()
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stop.set())
    simulator = Simulator(
        access=access, root=directory / "nodes", registry=agent_registry(), seed=seed, name_prefix=name_prefix
    )
    shown = ", ".join(filter(None, (spec, f"{nic_nodes} NIC nodes" if nic_nodes else "")))
    with console.status(Text(f"Registering nodes {shown}…")):
        simulator.start()
    try:
        names = simulator.add_nodes(requests, options=NodeOptions(gpu_plugin=gpu_plugin))
        socket_path = directory / SOCKET_FILE
        simulator.serve_control(socket_path)
        pid = os.getpid()
        write_state(
            state_dir=directory,
            state=SimState(
                pid=pid, pid_start=process_start_time(pid), server=access.server, socket=str(socket_path), nodes=names
            ),
        )
        console.print(_nodes_table(simulator.call(_rows(simulator))))
        console.print("Faults: [bold]gpu-operator sim fault --help[/]. Press [bold]Ctrl-C[/] to remove the nodes.")
        stop.wait()
    finally:
        with console.status("Removing the simulated nodes…"):
            simulator.stop()
        (directory / STATE_FILE).unlink(missing_ok=True)
    console.print("Simulated nodes removed.")


async def _rows(simulator: Simulator) -> list[dict[str, Any]]:
    return node_rows(simulator.nodes)  # read in the simulator's loop, which owns the nodes


def _nodes_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Simulated nodes", title_justify="left")
    for column in ("node", "profile", "ready", "heartbeats", "pods", "devices (capacity/allocatable)"):
        table.add_column(column)
    for row in rows:
        devices = ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in row["resources"].items()) or "-"
        profile = f"{row['profile']} + {row['nics']}" if row.get("nics") else row["profile"]
        # Node names come from --name-prefix: shown as they are, never as rich markup.
        cells = (row["name"], profile, row["ready"], row["heartbeats"], row["pods"], devices)
        table.add_row(*(Text(str(cell)) for cell in cells))
    return table


def _send(state_dir: Path | None, body: dict[str, Any]) -> Any:
    try:
        return request(state_dir=_state_dir(state_dir), body=body)
    except ControlError as error:
        raise click.ClickException(str(error)) from error


@sim_group.command(name="status")
@state_dir_option
def status_command(*, state_dir: Path | None) -> None:
    """List the running simulator's nodes."""
    console.print(_nodes_table(_send(state_dir, {"op": "status"})))


@sim_group.command(name="profiles")
def profiles_command() -> None:
    """List the node profiles --nodes accepts."""
    table = Table(title="Node profiles", title_justify="left")
    for column in ("profile", "GPUs", "CPU", "memory", "OS", "kernel", "driver"):
        table.add_column(column)
    for name, p in sorted(NODE_PROFILES.items()):
        gpus = f"{p.gpu_count} x {p.gpu_model}" if p.gpu_count else "-"
        table.add_row(
            name,
            gpus,
            str(p.cpu_cores),
            p.memory,
            f"{p.os_id} {p.os_version_id}",
            p.kernel_version,
            p.driver_version or "-",
        )
    console.print(table)


@sim_group.group(name="fault")
def fault_group() -> None:
    """Inject a fault into a node of the running simulator."""


def _fault(state_dir: Path | None, body: dict[str, Any]) -> None:
    console.print(_send(state_dir, body), markup=False)


node_argument = click.argument("node")
gpu_option = click.option("--gpu", type=int, required=True, help="GPU index on the node.")


@fault_group.command(name="xid")
@node_argument
@gpu_option
@click.option("--xid", type=int, required=True, help="XID number, e.g. 79 (fallen off the bus) or 48 (DBE).")
@click.option("--gi-id", type=int, default=None, help="MIG GPU instance the error concerns.")
@state_dir_option
def xid_command(*, node: str, gpu: int, xid: int, gi_id: int | None, state_dir: Path | None) -> None:
    """Report an XID error on a GPU."""
    _fault(state_dir, {"op": "xid", "node": node, "gpu": gpu, "xid": xid, "gi_id": gi_id})


@fault_group.command(name="lose-gpu")
@node_argument
@gpu_option
@state_dir_option
def lose_gpu_command(*, node: str, gpu: int, state_dir: Path | None) -> None:
    """Make a GPU fall off the bus."""
    _fault(state_dir, {"op": "lose-gpu", "node": node, "gpu": gpu})


@fault_group.command(name="recover-gpu")
@node_argument
@gpu_option
@state_dir_option
def recover_gpu_command(*, node: str, gpu: int, state_dir: Path | None) -> None:
    """Bring a lost GPU back."""
    _fault(state_dir, {"op": "recover-gpu", "node": node, "gpu": gpu})


@fault_group.command(name="kubelet-restart")
@node_argument
@state_dir_option
def kubelet_restart_command(*, node: str, state_dir: Path | None) -> None:
    """Restart the node's kubelet: device-plugin sockets removed, plugins must re-register."""
    _fault(state_dir, {"op": "kubelet-restart", "node": node})


@fault_group.command(name="not-ready")
@node_argument
@click.option("--stop-heartbeats", is_flag=True, help="Stop Lease/status updates instead of reporting Ready=False.")
@state_dir_option
def not_ready_command(*, node: str, stop_heartbeats: bool, state_dir: Path | None) -> None:
    """Make the node NotReady."""
    _fault(state_dir, {"op": "not-ready", "node": node, "stop_heartbeats": stop_heartbeats})


@fault_group.command(name="ready")
@node_argument
@state_dir_option
def ready_command(*, node: str, state_dir: Path | None) -> None:
    """Make the node Ready again (heartbeats resume)."""
    _fault(state_dir, {"op": "ready", "node": node})


@fault_group.command(name="ofed")
@node_argument
@click.option(
    "--mode",
    type=click.Choice(["fail", "hang", "clear"]),
    required=True,
    help="fail: the next OFED driver loads exit 1; hang: they never finish; clear: they succeed again.",
)
@click.option("--image-contains", default="", help="Only for OFED images containing this text (e.g. a version).")
@state_dir_option
def ofed_command(*, node: str, mode: str, image_contains: str, state_dir: Path | None) -> None:
    """Make the node's simulated OFED driver (network operator) fail or hang on its next load."""
    _fault(state_dir, {"op": "ofed", "node": node, "mode": mode, "image_contains": image_contains})


@fault_group.command(name="crash")
@node_argument
@click.option("--namespace", default=None)
@click.option("--pod", default=None)
@click.option("--container", default=None)
@click.option("--program", default=None, help="Agent program name (the NAME of `gpu-operator agent NAME`).")
@state_dir_option
def crash_command(
    *,
    node: str,
    namespace: str | None,
    pod: str | None,
    container: str | None,
    program: str | None,
    state_dir: Path | None,
) -> None:
    """Crash a running agent program on the node (it restarts like restartPolicy Always)."""
    _fault(
        state_dir,
        {"op": "crash", "node": node, "namespace": namespace, "pod": pod, "container": container, "program": program},
    )
