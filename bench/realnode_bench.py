"""Real nodes: start to Ready, footprint, and `helm install` to a Ready operator pod.

Two real nodes (kubelet + containerd + runc) join a fresh local control plane with the product image
imported; the figures are the node start to Node Ready (per node: namespace, containerd, image import,
kubelet registration), the kubelet's and containerd's RSS per node once idle, `helm install --wait` of
the chart (GPU operands off: these nodes have no GPU) to the operator pod Ready with the image present
(target under 15 s), and the clean stop with the host restored.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import locate_node_binaries

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "gpu-operator"
OPERANDS_OFF = {
    key: {"enabled": False}
    for key in ("driver", "toolkit", "devicePlugin", "dcgmExporter", "dcgm", "gfd", "migManager",
                "nodeStatusExporter", "validator")
}  # fmt: skip
INSTALL_TARGET_S = 15.0
SETTLE_S = 20.0


@dataclass
class NodeFigures:
    name: str
    containerd_s: float
    images_s: float
    ready_s: float
    kubelet_rss_mib: float
    containerd_rss_mib: float


@dataclass
class Results:
    nodes: list[NodeFigures] = field(default_factory=list)
    all_ready_s: float = 0.0
    install_s: list[float] = field(default_factory=list)
    stop_s: float = 0.0


def _rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(*, binaries: KubeBinaries, image: Path, installs: int = 3, log: Callable[[str], None] = print) -> Results:
    results = Results()
    node_binaries = locate_node_binaries()
    cluster = LocalCluster(binaries=binaries, real_nodes=2, node_images=[image], node_binaries=node_binaries)
    cluster.start()
    try:
        fleet = cluster.real_nodes
        assert fleet is not None
        results.all_ready_s = fleet.timings["ready"]
        log(f"real nodes Ready {results.all_ready_s:.1f} s after they started")
        time.sleep(SETTLE_S)
        for node in fleet.nodes:
            pids = node.pids()
            results.nodes.append(
                NodeFigures(
                    name=node.spec.name,
                    containerd_s=node.timings["containerd"],
                    images_s=node.timings["images"] - node.timings["containerd"],
                    ready_s=node.timings["ready"],
                    kubelet_rss_mib=_rss_mib(pids.get("kubelet")),
                    containerd_rss_mib=_rss_mib(pids.get("containerd")),
                )
            )
        with tempfile.TemporaryDirectory() as tmp:
            values = Path(tmp) / "values.yaml"
            values.write_text(yaml.safe_dump(OPERANDS_OFF), encoding="utf-8")
            for run in range(installs):
                namespace = f"bench-{run}"
                t0 = time.monotonic()
                cluster.helm("install", "gpu-operator", str(CHART), "-n", namespace, "--create-namespace",
                             "-f", str(values), "--wait", "--timeout", "120s", timeout=150)  # fmt: skip
                results.install_s.append(time.monotonic() - t0)
                log(f"helm install {run + 1}: {results.install_s[-1]:.1f} s")
                cluster.helm("uninstall", "gpu-operator", "-n", namespace, "--wait", "--timeout", "90s", timeout=120)
                cluster.kubectl("delete", "namespace", namespace, "--wait=true", timeout=120)
    finally:
        t0 = time.monotonic()
        cluster.stop()
        results.stop_s = time.monotonic() - t0
    return results


def markdown(results: Results) -> str:
    rows = [
        "| node | containerd up s | image import s | Node Ready s (from the first node's start) | kubelet RSS MiB | "
        "containerd RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in results.nodes:
        rows.append(
            f"| {n.name} | {n.containerd_s:.2f} | {n.images_s:.2f} | {n.ready_s:.1f} | {n.kubelet_rss_mib:.0f} | "
            f"{n.containerd_rss_mib:.0f} |"
        )
    install = results.install_s
    verdict = "met" if install and statistics.median(install) < INSTALL_TARGET_S else "NOT met"
    lines = [
        "\n".join(rows),
        "",
        f"- Both nodes Ready {results.all_ready_s:.1f} s after the first node started (nodes start one after "
        "the other: namespace, containerd, image import, kubelet).",
        f"- `helm install --wait` to the operator pod Ready, image present, {len(install)} runs: "
        + ", ".join(f"{s:.1f} s" for s in install)
        + (
            f" (median {statistics.median(install):.1f} s; target < {INSTALL_TARGET_S:.0f} s: {verdict})."
            if install
            else "."
        ),
        f"- Clean stop of the cluster with the host restored (processes, cgroups, bridges, chains, sysctls): "
        f"{results.stop_s:.1f} s.",
        f"- RSS read {SETTLE_S:.0f} s after the nodes were Ready, with no pods but the operator's.",
    ]
    return "\n".join(lines)
