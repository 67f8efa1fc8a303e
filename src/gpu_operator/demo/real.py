"""``gpu-operator demo --real-nodes``: the same story on real kubelets, with the fake NVIDIA driver.

Two real nodes (kubelet + containerd on this machine, as root) join a local control plane: an 8-GPU
DGX H100 and a 2-GPU A100 host with fake GPUs and a fake kernel. ``helm install`` of the chart, its
driver the fake driver image (``demo_real_upgrade``), brings the ClusterPolicy to ready, shown live
per node, the driver container installing the fake driver (``sim.fakedriver``); a pod gets two GPUs
through CDI and its ``nvidia-smi`` lists them; the exporter serves their metrics at its pod's
address; an XID written into the node's driver takes a GPU out of the Node's allocatable until it
recovers; the A100 node switches to a MIG geometry; a new ``driver.version`` rolls node by node.

The simulator's demo (``make demo``) stays the default: it needs no root and no node binaries and
reaches a first look in about a minute, where this one takes several.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import yaml
from rich.console import Console

from gpu_operator.cli.status import gather, print_status
from gpu_operator.demo.progress import gpu_resources, operand_pods
from gpu_operator.demo.real_upgrade import DRIVER_VALUES, NEW_VERSION, OLD_VERSION, driver_image, run_upgrade
from gpu_operator.demo.workload import EXPORTER_DAEMONSET, EXPORTER_PORT, UTIL_METRIC, switch_mig
from gpu_operator.kube.typed import Client, Node, Pod, codecs
from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, find_checkout_root, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.health import fetch_text
from gpu_operator.localcluster.nodes.binaries import locate_node_binaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.fakedriver.nodes import Shape, attach, node_setup
from gpu_operator.sim.hardware import pci_functions

PROFILES = {"real-node-1": "dgx-h100", "real-node-2": "a100-mig"}
NAMESPACE = "gpu-operator"
STEPS = 8
SHAPE: Shape = "driver-container"
#: The chart's defaults with the fake driver image as the driver, and one resource per MIG profile.
VALUES = {"driver": DRIVER_VALUES, "mig": {"strategy": "mixed"}}
POD = "cuda-two"


def _step(console: Console, number: int, text: str) -> None:
    console.rule(f"[bold][{number}/{STEPS}] {text}", align="left")


def _image() -> Path:
    root = find_checkout_root()
    if root is None:
        raise click.ClickException("the real-node demo runs from a source checkout (it builds the image)")
    built = subprocess.run([sys.executable, str(root / "hack" / "image" / "build.py")], cwd=root,
                           capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
    if built.returncode != 0:
        raise click.ClickException(f"make image failed:\n{built.stderr[-2000:]}")
    return root / "build" / "image" / "gpu-operator.oci.tar"


def _reference(archive: Path) -> str:
    return str(json.loads((archive.parent / "image.json").read_text(encoding="utf-8"))["reference"])


def _allocatable(client: Client, node: str) -> str:
    return gpu_resources(client.get(Node, node).to_dict()).get("nvidia.com/gpu", "0")


def _watch_ready(*, console: Console, cluster: LocalCluster, timeout: float = 300.0) -> float:
    """Print each node's first blocking step whenever it changes, until every node and the policy are ready."""
    begin = time.monotonic()
    last: dict[str, str] = {}
    while time.monotonic() - begin < timeout:
        policies, reports = gather(kubeconfig=str(cluster.kubeconfig_path), namespace=NAMESPACE)
        for report in reports:
            now = report.blocking or "ready"
            if last.get(report.node) != now:
                console.print(f"  {time.monotonic() - begin:5.1f} s  {report.node}: {now}", soft_wrap=True)
                last[report.node] = now
        nodes_ready = len(reports) == len(PROFILES) and all(not r.blocking for r in reports)
        if nodes_ready and policies and (policies[0].get("status") or {}).get("state") == "ready":
            return time.monotonic() - begin
        time.sleep(1.0)
    raise click.ClickException(f"the ClusterPolicy was not ready after {timeout:.0f} s; see gpu-operator status")


def _workload(*, console: Console, cluster: LocalCluster, client: Client, image: str) -> None:
    _step(console, 4, "A pod asks for 2 nvidia.com/gpu on real-node-1: CDI gives it exactly those")
    show = "ls /dev | tr '\\n' ' '; echo; nvidia-smi -L; sleep 3600"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": "default"},
           "spec": {"nodeName": "real-node-1", "containers": [{
               "name": "cuda", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", show],
               "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}  # fmt: skip
    client.create(codecs.from_dict(pod))

    def logs() -> list[str] | None:
        lines = cluster.kubectl("logs", "-n", "default", POD, check=False).stdout.splitlines()
        return lines if any(line.startswith("GPU ") for line in lines) else None

    lines = wait_for(logs, timeout=120, interval=1.0, describe="the GPU pod's output")
    devices = [d for d in lines[0].split() if d.startswith("nvidia")]
    console.print(f"  its /dev: {' '.join(devices)}")
    for line in lines[1:]:
        console.print(f"  $ nvidia-smi -L → {line}", highlight=False)
    # A bare pod: the driver upgrade of step 8 may not evict it (upstream's rule), so it goes now.
    client.delete(Pod, POD, namespace="default", grace_period=0)


def _exporter(*, console: Console, client: Client) -> None:
    _step(console, 5, "The exporter's metrics, scraped at its pod's address on real-node-1")
    pod = operand_pods(client=client, namespace=NAMESPACE).get((EXPORTER_DAEMONSET, "real-node-1")) or {}
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        raise click.ClickException("no running exporter pod with an IP on real-node-1")
    url = f"http://{ip}:{EXPORTER_PORT}/metrics"
    console.print(f"  GET {url}")
    lines = [x for x in fetch_text(url).splitlines() if x.startswith(UTIL_METRIC + "{")]
    for line in lines[:3]:
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    console.print(f"  … {len(lines)} GPUs")


def _xid(*, console: Console, cluster: LocalCluster, client: Client) -> None:
    _step(console, 6, "An XID 79 on a real-node-2 GPU, written into the node's driver, then its recovery")
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node("real-node-2")
    driver = attach(node, profile=PROFILES["real-node-2"], shape=SHAPE, version=OLD_VERSION)
    console.print(f"  allocatable nvidia.com/gpu: {_allocatable(client, 'real-node-2')}")
    begin = time.monotonic()
    driver.inject_xid(uuid=driver.uuids[1], xid=79)
    wait_for(lambda: _allocatable(client, "real-node-2") == "1", timeout=60, describe="the lost GPU gone")
    console.print(f"  {time.monotonic() - begin:5.1f} s  XID 79 on {driver.uuids[1]}: allocatable 1")
    driver.recover(uuid=driver.uuids[1])
    wait_for(lambda: _allocatable(client, "real-node-2") == "2", timeout=60, describe="the GPU back")
    console.print(f"  {time.monotonic() - begin:5.1f} s  it answers again: allocatable 2")


def run_real_demo(*, console: Console, interactive: bool) -> None:
    """Every step on two real nodes with the fake driver, then tear everything down."""
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
        node_binaries = locate_node_binaries()
    except BinariesNotFoundError as error:
        raise click.ClickException(str(error)) from error
    begin = time.monotonic()
    _step(console, 1, "Build the images; start a control plane and two real nodes with fake GPUs")
    archive = _image()
    fake_driver = driver_image(product=archive, checkout=archive.parents[2])  # build/image/ of the checkout
    cluster = LocalCluster(
        binaries=binaries, real_nodes=len(PROFILES), node_images=[archive, fake_driver.archive],
        node_binaries=node_binaries, node_hardware=[pci_functions(p) for p in PROFILES.values()],
        node_setups=[node_setup(profile=p, shape=SHAPE) for p in PROFILES.values()],
    )  # fmt: skip
    with cluster, contextlib.closing(cluster.client()) as client, tempfile.TemporaryDirectory() as tmp:
        for name, profile in PROFILES.items():
            console.print(f"  {name}: kubelet + containerd, the fake GPUs of a {profile}, no driver")
        _step(console, 2, f"helm install the chart, its driver the fake driver image {fake_driver.references[0]}")
        values = Path(tmp) / "values.yaml"
        values.write_text(yaml.safe_dump(VALUES), encoding="utf-8")
        chart = archive.parents[2] / "deploy" / "helm" / "gpu-operator"  # build/image/ of the checkout
        cluster.helm("install", "gpu-operator", str(chart), "-n", NAMESPACE, "--create-namespace", "-f", str(values),
                     "--wait", "--timeout", "120s", timeout=150)  # fmt: skip
        console.print("  the operator runs as a pod of the chart")
        _step(console, 3, "Watch each node's readiness chain until the ClusterPolicy is ready")
        took = _watch_ready(console=console, cluster=cluster)
        console.print(f"  [green]ClusterPolicy ready[/green] after {took:.0f} s")
        _workload(console=console, cluster=cluster, client=client, image=_reference(archive))
        _exporter(console=console, client=client)
        _xid(console=console, cluster=cluster, client=client)
        _step(console, 7, "Switch the A100 node to MIG config all-1g.5gb")
        switch_mig(console=console, client=client, node="real-node-2", config="all-1g.5gb",
                   resource="nvidia.com/mig-1g.5gb", timeout=240)  # fmt: skip
        console.print("  the MIG manager restarted the GPU operands of real-node-2; they come back:")
        took = _watch_ready(console=console, cluster=cluster)
        console.print(f"  [green]ClusterPolicy ready[/green] again after {took:.0f} s")
        _step(console, 8, f"Upgrade the driver {OLD_VERSION} -> {NEW_VERSION}, one node at a time")
        # real-node-2's GPUs are MIG instances now: its workload asks for one of those.
        resources = {"real-node-1": "nvidia.com/gpu", "real-node-2": "nvidia.com/mig-1g.5gb"}
        took = run_upgrade(console=console, cluster=cluster, client=client, resources=resources,
                           image=_reference(archive))  # fmt: skip
        console.print(f"  [green]every GPU node is upgrade-done on {NEW_VERSION}[/green] after {took:.0f} s")
        policies, reports = gather(kubeconfig=str(cluster.kubeconfig_path), namespace=NAMESPACE)
        print_status(console=console, policies=policies, reports=reports)
        console.print(f"export KUBECONFIG={cluster.kubeconfig_path}")
        if interactive:
            console.print("\nThe cluster keeps running; press Ctrl-C to tear it down.")
            with contextlib.suppress(KeyboardInterrupt):
                while cluster.is_running():
                    time.sleep(1)
        console.print("tearing down: pods, nodes, control plane ...")
    console.print(f"[green]demo finished in {time.monotonic() - begin:.0f} s; the host is as it was[/green]")
