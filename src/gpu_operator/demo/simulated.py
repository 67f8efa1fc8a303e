"""``gpu-operator demo``: the operator at work on an embedded local cluster with simulated GPU nodes.

The steps: a real control plane starts on 127.0.0.1 and gets the CRDs and the operator's namespace;
simulated GPU nodes join it (their kubelets run the operator's real agents in this process); ``helm
install`` of the chart runs the operator as a pod on a simulated node, as its service account (``--in-process``:
a thread of this process instead); the default ClusterPolicy brings every node's readiness chain to ready, shown
live; a workload pod gets two H100 GPUs and the exporter shows them busy, labelled with the pod; the
policy's driver version changes and the rolling upgrade passes through the GPU nodes, previewed first as
``gpu-operator upgrade plan`` shows it, then shown live (``demo.upgrade``); the A100 node is switched to a
MIG geometry and advertises the new resources. Then the cluster stays up for ``kubectl`` until Ctrl-C (or
not, with ``--no-interactive``) and everything is torn down.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpu_operator.cli.logs import HTTP_LOGGERS
from gpu_operator.demo.install import install_operator
from gpu_operator.demo.operator import OPERATOR_NAMESPACE, create_operator_namespace
from gpu_operator.demo.progress import watch_until_ready
from gpu_operator.demo.upgrade import FIRST_VERSION, MAX_PARALLEL, NEW_VERSION, driver_section, run_upgrade
from gpu_operator.demo.workload import (
    WORKLOAD_NAMESPACE,
    WORKLOAD_POD,
    WORKLOAD_PROGRAM,
    WorkloadRecorder,
    exporter_url,
    run_workload,
    switch_mig,
    wait_busy_lines,
)
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kube.crds import install_crds
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.kube.typed import Client, codecs
from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, KubeBinaries, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry

DEFAULT_NODES = "dgx-h100:2,a100-mig:1,pcie-l4:1,cpu-only:1"
POLICY_NAME = "cluster-policy"
MIG_CONFIG = "all-1g.5gb"
MIG_RESOURCE = "nvidia.com/mig-1g.5gb"
WORKLOAD_GPUS = 2
BUSY_PERCENT = 90.0
STEPS = 9
WIDE = 160
#: The chart's default values (the exporter embeds the host engine: no standalone DCGM), plus the MIG
#: strategy that advertises one resource per MIG profile, a 1 s exporter interval for a lively demo, and a
#: driver named explicitly with a rolling-upgrade policy (the upgrade step changes its version).
POLICY: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": POLICY_NAME},
    "spec": {
        "driver": driver_section(version=FIRST_VERSION),
        "dcgm": {"enabled": False},
        "mig": {"strategy": "mixed"},
        "dcgmExporter": {"env": [{"name": "DCGM_EXPORTER_INTERVAL", "value": "1000"}]},
    },
}


def _step(console: Console, number: int, text: str) -> None:
    console.rule(f"[bold][{number}/{STEPS}] {text}", align="left")


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """Send the operator's and agents' logs to ``path`` instead of the terminal."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    quiet = [logging.getLogger(name) for name in HTTP_LOGGERS]
    for logger in quiet:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        for logger in quiet:
            logger.setLevel(logging.NOTSET)
        handler.close()


def _first(names: list[str], profile: str) -> str | None:
    return next((n for n in names if f"-{profile}-" in n), None)


def _show_workload(*, console: Console, client: Client, sim: Simulator, recorder: WorkloadRecorder, node: str) -> None:
    _step(console, 5, f"A workload pod asks for {WORKLOAD_GPUS} nvidia.com/gpu on {node}")
    got = run_workload(client=client, recorder=recorder, node=node, gpus=WORKLOAD_GPUS)
    uuids = list(got.uuids)
    by_uuid = {d.uuid: d.index for d in sim.node(node).gpu.devices()}
    console.print(f"  pod {WORKLOAD_NAMESPACE}/{WORKLOAD_POD} is Running; its container got {got.how}")
    for uuid in uuids:
        console.print(f"  got GPU {by_uuid.get(uuid, '?')}: {uuid}")
    _step(console, 6, "The exporter's view of the busy GPUs")
    backend = sim.node(node).gpu
    if not isinstance(backend, SimulatedBackend):
        raise click.ClickException(f"{node} has no simulated GPUs")
    for uuid in uuids:
        if uuid in by_uuid:
            backend.set_load(by_uuid[uuid], BUSY_PERCENT)
    console.print(
        f"  the simulated GPUs {', '.join(str(by_uuid.get(u)) for u in uuids)} now run at {BUSY_PERCENT:.0f}%"
    )
    url = exporter_url(client=client, namespace=OPERATOR_NAMESPACE, node=node)
    console.print(f"  GET {url}")
    for line in wait_busy_lines(url=url, uuids=uuids, pod=WORKLOAD_POD):
        busy = any(u in line for u in uuids)
        console.print(f"  {'[bold]' if busy else '[dim]'}{line}", highlight=False, soft_wrap=True)


def _explore(*, console: Console, cluster: LocalCluster, binaries: KubeBinaries, log_path: Path) -> None:
    _step(console, 9, "Explore")
    console.print(f"export KUBECONFIG={cluster.kubeconfig_path}")
    kubectl = binaries.kubectl
    labels = (
        "nvidia.com/gpu.product,nvidia.com/gpu-driver-upgrade-state,nvidia.com/mig.config,nvidia.com/mig.config.state"
    )
    nodes = ("get", "nodes", "-L", labels)
    console.print(f"{kubectl} {' '.join(nodes)}")
    console.print(cluster.kubectl(*nodes, check=False).stdout, markup=False, highlight=False)
    console.print(f"{kubectl} get clusterpolicy {POLICY_NAME} -o yaml")
    console.print(f"{kubectl} -n {OPERATOR_NAMESPACE} get daemonsets,pods -o wide")
    console.print(f"{kubectl} describe node <node>   # allocatable nvidia.com/gpu and mig resources")
    console.print("gpu-operator status [--node <node>]   # each GPU node's readiness chain and upgrade state")
    console.print(f"operator and agent logs: {log_path}")


def run_demo(*, console: Console, interactive: bool, nodes: str = DEFAULT_NODES, in_process: bool = False) -> None:
    """Run every demo step against a fresh local cluster, then tear it down."""
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        raise click.ClickException(str(error)) from error
    begin = time.monotonic()
    _step(console, 1, "Start a real control plane on 127.0.0.1, install the CRDs and the operator's namespace")
    with LocalCluster(binaries=binaries) as cluster, contextlib.closing(cluster.client()) as client:
        console.print(f"  etcd, kube-apiserver, controller-manager, scheduler ready at {cluster.server}")
        for name in install_crds(client=client):
            console.print(f"  [green]established[/green] {name}")
        create_operator_namespace(client=client)
        console.print(f"  namespace {OPERATOR_NAMESPACE} (pod-security.kubernetes.io/enforce=privileged)")
        log_path = Path(tempfile.mkstemp(prefix="gpu-operator-demo-", suffix=".log", dir="/tmp")[1])
        system = _system(console=console, cluster=cluster, client=client, nodes=nodes, in_process=in_process)
        with _log_to(log_path), system:
            _explore(console=console, cluster=cluster, binaries=binaries, log_path=log_path)
            if interactive:
                wait_for_ctrl_c(console=console, cluster=cluster)
            console.print("tearing down: operator, simulated nodes, control plane ...")
    console.print(
        f"[green]demo finished in {time.monotonic() - begin:.0f} s; every process it started is stopped[/green]"
    )


def wait_for_ctrl_c(*, console: Console, cluster: LocalCluster) -> None:
    console.print("\nThe cluster keeps running; press Ctrl-C to tear it down.")
    try:
        while cluster.is_running():
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("\nstopping ...")


@contextlib.contextmanager
def _system(*, console: Console, cluster: LocalCluster, client: Client, nodes: str, in_process: bool) -> Iterator[None]:
    """Steps 2 to 8; the simulated nodes and the operator keep running until the block ends."""
    access = ClusterAccess.from_kubeconfig(cluster.kubeconfig_path)
    recorder = WorkloadRecorder()
    registry = agent_registry()  # every node agent by its `gpu-operator agent` name, and the operator pod
    registry.register_program(WORKLOAD_PROGRAM, recorder.program)
    _step(console, 2, f"Add simulated GPU nodes: {nodes}")
    with Simulator(access=access, registry=registry, name_prefix="demo") as sim:
        names = sim.add_nodes(nodes)
        for name in names:
            profile = sim.node(name).profile
            console.print(f"  {name}: {profile.gpu_count} x {profile.gpu_model or 'no GPU'}")
        _step(console, 3, "Run the operator" if in_process else "Install the operator with Helm")
        with install_operator(console=console, cluster=cluster, client=client, in_process=in_process) as operator:
            _step(console, 4, f"Apply a ClusterPolicy (driver {FIRST_VERSION}) and watch every node become ready")
            client.create(codecs.from_dict(POLICY))
            took = watch_until_ready(
                console=console, client=client, sim=sim, namespace=OPERATOR_NAMESPACE, policy=POLICY_NAME
            )
            console.print(f"  [green]ClusterPolicy {POLICY_NAME} is ready[/green] after {took:.0f} s")
            h100 = _first(names, "dgx-h100")
            if h100 is None:
                console.print("  [yellow]no dgx-h100 node in --nodes: skipping the workload and exporter steps")
            else:
                _show_workload(console=console, client=client, sim=sim, recorder=recorder, node=h100)
            _step(console, 7, f"Change the driver to {NEW_VERSION}: a rolling upgrade, {MAX_PARALLEL} nodes at a time")
            workload = (WORKLOAD_NAMESPACE, WORKLOAD_POD) if h100 is not None else None
            run_upgrade(console=console, client=client, sim=sim, kubeconfig=cluster.kubeconfig_path,
                        namespace=OPERATOR_NAMESPACE, policy=POLICY, workload=workload)  # fmt: skip
            _step(console, 8, f"Switch the A100 node to MIG config {MIG_CONFIG}")
            a100 = _first(names, "a100-mig")
            if a100 is None:
                console.print("  [yellow]no a100-mig node in --nodes: skipping the MIG step")
            else:
                switch_mig(console=console, client=client, node=a100, config=MIG_CONFIG, resource=MIG_RESOURCE)
                console.print(f"  [green]{a100} advertises {MIG_RESOURCE}[/green]")
            if (problem := operator.problem()) is not None:
                raise click.ClickException(problem)
            yield
