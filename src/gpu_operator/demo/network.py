"""``gpu-operator demo --network``: GPUDirect RDMA on a simulated DGX node with ConnectX-7 NICs.

Both operators run against a real control plane on 127.0.0.1 (in threads of this process); the nodes are
simulated kubelets that run the operators' real agents:

1. a control plane, the GPU and the network CRDs, both operators' namespaces;
2. a DGX H100 node carrying ConnectX-7 NICs (a simulated sysfs tree under its host root: PCI functions,
   RDMA devices, ``/dev/infiniband``) and a CPU node;
3. the GPU operator and the Network Operator;
4. a ClusterPolicy with ``driver.rdma.enabled`` and a NicClusterPolicy whose OFED driver, RDMA shared
   and SR-IOV device plugins and NIC feature discovery name this operator's image, so our agents run
   them; the milestones are shown as they happen: the OFED driver's ``.driver-ready``, the RDMA and
   SR-IOV (the NICs' VFs) resources on the Node, the GPU driver's ``nvidia-peermem`` loaded (never
   before OFED is ready);
5. a pod asks for one ``nvidia.com/gpu`` and one RDMA resource and gets both: a GPU and the RDMA
   device nodes the RDMA plugin's Allocate gave it;
6. explore, then tear down.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpu_operator import __version__
from gpu_operator.api.crdsets import NETWORK, crd_set
from gpu_operator.demo.operator import create_operator_namespace, operator_thread
from gpu_operator.demo.simulated import wait_for_ctrl_c
from gpu_operator.demo.upgrade import FIRST_VERSION, driver_section
from gpu_operator.demo.workload import WORKLOAD_NAMESPACE, WorkloadRecorder, granted
from gpu_operator.kube.crds import install_crds
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.kube.typed import ApiError, Client, Node, Pod, codecs
from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.operator import NetworkOperatorThread
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.nics import NicRequest
from gpu_operator.sim.programs.agents import agent_registry

JSON = dict[str, Any]
NETWORK_NAMESPACE = "nvidia-network-operator"
STEPS = 6
RDMA_RESOURCE_NAME = "rdma_shared_device_a"
RDMA_RESOURCE = f"rdma/{RDMA_RESOURCE_NAME}"
RDMA_HCA_MAX = 63
NICS = NicRequest(model="cx7", count=2)
POD = "gpudirect-rdma"
PEERMEM_MODULE = "sys/module/nvidia_peermem"
POLICY_NAME = "cluster-policy"
#: This operator's own image, as a NicClusterPolicy section names it: our agents run the section.
OUR_IMAGE: JSON = {"repository": "ghcr.io/gpu-operator-py", "image": "gpu-operator", "version": f"v{__version__}"}
SRIOV_RESOURCE = "nvidia.com/sriov_ib"
SRIOV_CONFIG = json.dumps(
    {
        "resourceList": [
            {
                "resourcePrefix": "nvidia.com",
                "resourceName": "sriov_ib",
                "selectors": {"vendors": ["15b3"], "devices": ["101e"], "isRdma": True},
            }
        ]
    }
)
OFED_VERSION = "25.04-0.6.1.0-2"
RDMA_CONFIG = json.dumps(
    {
        "periodicUpdateInterval": 5,
        "configList": [
            {
                "resourceName": RDMA_RESOURCE_NAME,
                "rdmaHcaMax": RDMA_HCA_MAX,
                # The ConnectX-7 PFs (1021): their VFs (101e) are the SR-IOV plugin's.
                "selectors": {"vendors": ["15b3"], "deviceIDs": ["1021"]},
            }
        ],
    }
)


def cluster_policy() -> JSON:
    """GPUDirect RDMA on the GPU side: the driver pod gets its ``nvidia-peermem-ctr`` side-car."""
    driver = {**driver_section(version=FIRST_VERSION), "rdma": {"enabled": True}}
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {"driver": driver, "dcgm": {"enabled": False}},
    }


def nic_cluster_policy() -> JSON:
    """OFED, the RDMA shared and SR-IOV device plugins and NIC feature discovery, all run by our agents."""
    return {
        "apiVersion": net.API_VERSION,
        "kind": net.NCP_KIND,
        "metadata": {"name": net.NCP_NAME},
        "spec": {
            # The CRD wants a DOCA-style version: the tag names the driver release our agent stands in for.
            "ofedDriver": {**OUR_IMAGE, "version": OFED_VERSION, "upgradePolicy": {"autoUpgrade": False}},
            "rdmaSharedDevicePlugin": {**OUR_IMAGE, "config": RDMA_CONFIG},
            "sriovDevicePlugin": {**OUR_IMAGE, "config": SRIOV_CONFIG},
            "nicFeatureDiscovery": {**OUR_IMAGE},
        },
    }


def gpudirect_pod(*, node: str, program: str) -> JSON:
    """A pod asking for one GPU and one shared RDMA device on ``node``."""
    limits = {keys.GPU_RESOURCE: "1", RDMA_RESOURCE: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": WORKLOAD_NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "nccl-test",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "command": ["gpu-operator", "agent", program],
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
    }


@dataclass
class Milestones:
    """When (seconds after the policies were applied) each GPUDirect milestone was first seen."""

    ofed_ready: float | None = None
    rdma_allocatable: float | None = None
    sriov_allocatable: float | None = None
    peermem_loaded: float | None = None
    gpu_allocatable: float | None = None
    nic_labels: float | None = None

    def done(self) -> bool:
        return None not in (
            self.ofed_ready,
            self.rdma_allocatable,
            self.sriov_allocatable,
            self.peermem_loaded,
            self.gpu_allocatable,
        )


def _nic_labels(client: Client, node: str) -> str:
    """NIC feature discovery's labels on the node (``key=value, ...``), "" before it ran."""
    try:
        meta = client.get(Node, node).metadata
    except ApiError:
        return ""
    labels = (meta.labels if meta else None) or {}
    keys_ = (net.NIC_FD_COUNT, net.NIC_FD_PRODUCT, net.NIC_FD_INFINIBAND_COUNT, net.NIC_FD_SRIOV_VFS)
    return ", ".join(f"{k}={labels[k]}" for k in keys_ if k in labels) if net.NIC_FD_COUNT in labels else ""


def _allocatable(client: Client, node: str, resource: str) -> int:
    try:
        obj = client.get(Node, node)
    except ApiError:
        return 0
    value = ((obj.status.allocatable if obj.status else None) or {}).get(resource, "0")
    return int(str(value) or "0")


def _step(console: Console, number: int, text: str) -> None:
    console.rule(f"[bold][{number}/{STEPS}] {text}", align="left")


def _watch(*, console: Console, client: Client, host_root: Path, node: str, timeout: float) -> Milestones:
    seen = Milestones()
    begin = time.monotonic()

    def note(field: str, text: str) -> None:
        if getattr(seen, field) is None:
            setattr(seen, field, time.monotonic() - begin)
            console.print(f"  {getattr(seen, field):5.1f} s  {text}", soft_wrap=True)

    def check() -> bool:
        if (host_root / net.DRIVER_READY.lstrip("/")).exists():
            note("ofed_ready", f"OFED driver loaded: {net.DRIVER_READY} written")
        if (count := _allocatable(client, node, RDMA_RESOURCE)) > 0:
            note("rdma_allocatable", f"{node} advertises {RDMA_RESOURCE}: {count}")
        if (count := _allocatable(client, node, SRIOV_RESOURCE)) > 0:
            note("sriov_allocatable", f"{node} advertises {SRIOV_RESOURCE}: {count} (its ConnectX-7 VFs)")
        if labels := _nic_labels(client, node):
            note("nic_labels", f"NIC feature discovery labelled {node}: {labels}")
        if (host_root / PEERMEM_MODULE).exists():
            note("peermem_loaded", "the GPU driver's nvidia-peermem is loaded (GPUDirect RDMA is on)")
        if (count := _allocatable(client, node, keys.GPU_RESOURCE)) > 0:
            note("gpu_allocatable", f"{node} advertises {keys.GPU_RESOURCE}: {count}")
        return seen.done()

    wait_for(check, timeout=timeout, interval=0.2, describe="the GPUDirect RDMA milestones")
    return seen


def _run_pod(*, console: Console, client: Client, recorder: WorkloadRecorder, program: str, node: str) -> None:
    client.create(codecs.from_dict(gpudirect_pod(node=node, program=program)))

    def running() -> bool:
        pod = client.get(Pod, POD, namespace=WORKLOAD_NAMESPACE)
        return bool(pod.status and pod.status.phase == "Running") and recorder.allocations(POD) is not None

    wait_for(running, timeout=120, interval=0.5, describe=f"pod {POD} Running")
    allocations = recorder.allocations(POD) or []
    gpu = granted([a for a in allocations if a.resource_name == keys.GPU_RESOURCE])
    console.print(f"  pod {WORKLOAD_NAMESPACE}/{POD} is Running on {node}")
    console.print(f"  {keys.GPU_RESOURCE}: {gpu.how}")
    for allocation in allocations:
        if allocation.resource_name != RDMA_RESOURCE:
            continue
        paths = [d.host_path for d in allocation.devices] or list(allocation.cdi_devices)
        console.print(
            f"  {RDMA_RESOURCE} (device {', '.join(allocation.device_ids)}): {', '.join(paths)}",
            soft_wrap=True,  # one line, however many HCAs: the paths are what a reader compares
        )


def _nic_lines(host_root: Path) -> list[str]:
    """The node's Mellanox PCI functions as its (simulated) sysfs shows them."""
    out = []
    for function in sorted((host_root / "sys" / "bus" / "pci" / "devices").glob("*")):
        try:
            vendor = (function / "vendor").read_text().strip()
            device = (function / "device").read_text().strip()
        except OSError:
            continue
        if vendor == "0x15b3":
            rdma = sorted(p.name for p in (function / "infiniband").glob("*"))
            out.append(f"Mellanox {device} at {function.name}, RDMA {', '.join(rdma) or '-'}")
    return out


@contextlib.contextmanager
def _operators(*, kubeconfig: Path) -> Iterator[None]:
    network = NetworkOperatorThread(kubeconfig=kubeconfig, namespace=NETWORK_NAMESPACE)
    with operator_thread(kubeconfig=kubeconfig), network:
        yield


def run_network_demo(*, console: Console, interactive: bool) -> None:
    """Run the GPUDirect RDMA story against a fresh local cluster, then tear it down."""
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        raise click.ClickException(str(error)) from error
    begin = time.monotonic()
    _step(console, 1, "Start a real control plane on 127.0.0.1; install the GPU and the network CRDs")
    with LocalCluster(binaries=binaries) as cluster, contextlib.closing(cluster.client()) as client:
        names = [*install_crds(client=client), *install_crds(client=client, manifests=dict(crd_set(NETWORK).manifests))]
        console.print(f"  {len(names)} CRDs established, e.g. nicclusterpolicies.mellanox.com")
        create_operator_namespace(client=client)
        create_operator_namespace(client=client, name=NETWORK_NAMESPACE)
        access = ClusterAccess.from_kubeconfig(cluster.kubeconfig_path)
        recorder = WorkloadRecorder()
        program = "demo-gpudirect"
        registry = agent_registry()
        registry.register_program(program, recorder.program)
        with Simulator(access=access, registry=registry, name_prefix="net") as sim:
            _step(console, 2, f"Add a simulated DGX H100 node with {NICS.count} x ConnectX-7, and a CPU node")
            dgx = sim.add_node("dgx-h100", nics=NICS)
            sim.add_node("cpu-only")
            host_root = sim.node(dgx).host_root
            for line in _nic_lines(host_root):
                console.print(f"  {dgx}: {line}")
            _step(console, 3, "Run the GPU operator and the Network Operator")
            with _operators(kubeconfig=cluster.kubeconfig_path):
                _step(console, 4, "Apply a ClusterPolicy (driver.rdma.enabled) and a NicClusterPolicy (our agents)")
                client.create(codecs.from_dict(cluster_policy()))
                client.create(codecs.from_dict(nic_cluster_policy()))
                seen = _watch(console=console, client=client, host_root=host_root, node=dgx, timeout=240)
                if (seen.peermem_loaded or 0.0) < (seen.ofed_ready or 0.0):
                    raise click.ClickException("nvidia-peermem was loaded before the OFED driver was ready")
                console.print("  [green]nvidia-peermem came up only after the OFED driver was ready[/green]")
                _step(console, 5, f"A pod asks for one {keys.GPU_RESOURCE} and one {RDMA_RESOURCE}")
                _run_pod(console=console, client=client, recorder=recorder, program=program, node=dgx)
                _step(console, 6, "Explore")
                console.print(f"export KUBECONFIG={cluster.kubeconfig_path}")
                console.print(f"kubectl describe node {dgx}   # allocatable {RDMA_RESOURCE} and {keys.GPU_RESOURCE}")
                console.print(f"kubectl -n {NETWORK_NAMESPACE} get nicclusterpolicy,daemonsets,pods -o wide")
                if interactive:
                    wait_for_ctrl_c(console=console, cluster=cluster)
                console.print("tearing down: operators, simulated nodes, control plane ...")
    console.print(f"[green]network demo finished in {time.monotonic() - begin:.0f} s[/green]")
