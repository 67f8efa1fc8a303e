"""The GPU stack on two real nodes with the fake NVIDIA driver: install, footprint, faults, MIG.

An 8-GPU DGX H100 and a 2-GPU A100 node (the fake driver on the host, no NFD) join a fresh local
control plane. Figures: `helm install` of the chart with its defaults (the driver on the host) to the
ClusterPolicy `ready`; the memory of every operand container on each node once settled (the sum of the
RSS of the processes in the node's pod cgroups, pause containers included); an XID 79 written into
the fake driver to the Node's allocatable dropping, and its recovery to allocatable back; the MIG
manager's switch of the A100 node to `all-1g.5gb` (label to 14 MIG devices allocatable).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Node

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes import cgroups
from gpu_operator.localcluster.nodes.binaries import locate_node_binaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.fakedriver.nodes import attach, node_setup
from gpu_operator.sim.hardware import pci_functions

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "gpu-operator"
PROFILES = {"real-node-1": "dgx-h100", "real-node-2": "a100-mig"}
SETTLE_S = 20.0


@dataclass
class Results:
    ready_s: float = 0.0
    operand_mib: dict[str, float] = field(default_factory=dict)
    xid_drop_s: float = 0.0
    xid_recover_s: float = 0.0
    mig_switch_s: float = 0.0


def _allocatable(kube: Client, node: str) -> str:
    status = kube.get(Node, node).status
    return str((status.allocatable or {}).get("nvidia.com/gpu", "")) if status else ""


def _pods_mib(cgroup: str) -> float:
    total = 0
    for pid in cgroups.pids(cgroup):
        try:
            for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue  # gone meanwhile
    return total / 1024


def _policy_ready(cluster: LocalCluster) -> bool:
    out = cluster.kubectl("get", "clusterpolicy", "-o", "jsonpath={.items[0].status.state}", check=False)
    return out.stdout.strip() == "ready"


def measure(*, binaries: KubeBinaries, image: Path, log: Callable[[str], None] = print) -> Results:
    results = Results()
    cluster = LocalCluster(
        binaries=binaries,
        real_nodes=len(PROFILES),
        node_images=[image],
        node_binaries=locate_node_binaries(),
        node_hardware=[pci_functions(p) for p in PROFILES.values()],
        node_setups=[node_setup(profile=p) for p in PROFILES.values()],
    )
    with cluster, tempfile.TemporaryDirectory() as tmp:
        kube = cluster.client()
        fleet = cluster.real_nodes
        assert fleet is not None
        values = Path(tmp) / "values.yaml"
        values.write_text(yaml.safe_dump({"driver": {"enabled": False}}), encoding="utf-8")
        t0 = time.monotonic()
        cluster.helm("install", "gpu-operator", str(CHART), "-n", "gpu-operator", "--create-namespace",
                     "-f", str(values), "--wait", "--timeout", "120s", timeout=150)  # fmt: skip
        wait_for(lambda: _policy_ready(cluster), timeout=300, interval=0.5, describe="the ClusterPolicy ready")
        results.ready_s = time.monotonic() - t0
        log(f"helm install to ClusterPolicy ready: {results.ready_s:.1f} s")
        time.sleep(SETTLE_S)
        for node in fleet.nodes:
            results.operand_mib[node.spec.name] = _pods_mib(node.spec.pods_cgroup)
        driver = attach(fleet.node("real-node-2"), profile=PROFILES["real-node-2"])
        t0 = time.monotonic()
        driver.inject_xid(uuid=driver.uuids[1], xid=79)
        wait_for(lambda: _allocatable(kube, "real-node-2") == "1", timeout=60, describe="the lost GPU gone")
        results.xid_drop_s = time.monotonic() - t0
        t0 = time.monotonic()
        driver.recover(uuid=driver.uuids[1])
        wait_for(lambda: _allocatable(kube, "real-node-2") == "2", timeout=60, describe="the GPU back")
        results.xid_recover_s = time.monotonic() - t0
        t0 = time.monotonic()
        cluster.kubectl("label", "node", "real-node-2", "nvidia.com/mig.config=all-1g.5gb", "--overwrite")
        wait_for(lambda: _allocatable(kube, "real-node-2") == "14", timeout=300, describe="14 MIG devices")
        results.mig_switch_s = time.monotonic() - t0
        kube.close()
    return results


def markdown(results: Results) -> str:
    rows = ["| node | GPUs | operand pods' RSS MiB (all containers, pause included) |", "|---|---:|---:|"]
    for name, mib in results.operand_mib.items():
        rows.append(f"| {name} ({PROFILES[name]}) | {'8' if PROFILES[name] == 'dgx-h100' else '2'} | {mib:.0f} |")
    return "\n".join(
        [
            "\n".join(rows),
            "",
            f"- `helm install` (chart defaults, driver on the host) to ClusterPolicy `ready`: {results.ready_s:.1f} s.",
            f"- XID 79 in the fake driver to the Node's allocatable dropping: {results.xid_drop_s:.1f} s; its "
            f"recovery to allocatable back: {results.xid_recover_s:.1f} s (the kubelet reports a device coming "
            "back at its next node status update, 10 s by default).",
            f"- MIG switch of the A100 node to `all-1g.5gb` (label to 14 MIG devices allocatable): "
            f"{results.mig_switch_s:.1f} s.",
            f"- RSS read {SETTLE_S:.0f} s after the policy was ready.",
        ]
    )
