"""The network operator at scale: policy-to-ready time, memory, CPU and idle API traffic.

The same method as ``operator_bench`` (whose helpers it imports): for each scale (100 and 1,000
simulated NIC nodes) on a fresh local control plane, three processes: this one (creates the
NicClusterPolicy ``nic-cluster-policy``, polls its ``status.state``, measures), the simulator
(``_sim_child``: Mellanox NIC nodes in the simulator's OS/kernel pools, their containers run by the
network stand-ins of ``sim.programs.netstandins``) and the operator (``_network_operator_child``:
:class:`~gpu_operator.reconcile.network.operator.NetworkOperator` with leader election, as
``gpu-operator network-operator`` runs it), so the operator's RSS and CPU are its own. API requests
are counted at the operator's HTTP transport (an httpx request hook).

The stand-ins keep the contracts the operator depends on: the OFED container "loads" for 0.5 s, writes
``.driver-ready`` and only then is Ready; the RDMA and SR-IOV plugins exit when it is missing. So
``ready`` means the operator labelled every node ``mofed.wait=false`` and the gated DaemonSets then
rolled out, all from the real controllers' status of the simulated kubelets' pods.

``python bench/network_bench.py --scales 100`` runs one scale and prints the section (for debugging);
``bench/run.py --only network_scale`` writes it into BENCHMARKS.md (``NETWORK_BENCH_SCALES=100`` limits it).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Namespace, Node, Pod
from operator_bench import (
    IDLE_SECONDS,
    READY_TIMEOUT,
    SETTLE_SECONDS,
    Idle,
    _category,
    _healthy_nodes,
    _memory_mib,
    _OperatorProcess,
    _requests,
    _table,
    _wait,
)

from gpu_operator.api.network.crd import network_crds
from gpu_operator.kube.api import NicClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.names import network as net
from gpu_operator.upgrade.ofed_proposal import NETWORK_NAMESPACE

SCALES = (100, 1000)
SCALES_ENV = "NETWORK_BENCH_SCALES"  # "100" or "100,1000": the scales bench/run.py runs
GPU_SECTION = "Operator at scale: 100 and 1,000 simulated nodes"  # operator_bench's, the peer rows' source
REPORT = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def _image(name: str, repository: str, version: str) -> dict[str, str]:
    return {"image": name, "repository": repository, "version": version}


_RDMA_CONFIG = (
    '{"configList":[{"resourceName":"rdma_shared_device_a","rdmaHcaMax":63,"selectors":{"vendors":["15b3"]}}]}'
)
_SRIOV_CONFIG = (
    '{"resourceList":[{"resourcePrefix":"nvidia.com","resourceName":"hostdev",'
    '"selectors":{"vendors":["15b3"],"isRdma":true}}]}'
)
#: The sections issue 19 benchmarks: OFED, both device plugins, Multus with the CNI plugins, nv-ipam.
POLICY_SPEC: dict[str, Any] = {
    "ofedDriver": {
        **_image("doca-driver", "nvcr.io/nvidia/mellanox", "doca3.5.0-26.07-0.7.0.0-0"),
        "upgradePolicy": {"autoUpgrade": False},
    },
    "rdmaSharedDevicePlugin": {
        **_image("k8s-rdma-shared-dev-plugin", "ghcr.io/mellanox", "v1.5.3"), "config": _RDMA_CONFIG,
    },
    "sriovDevicePlugin": {
        **_image("sriov-network-device-plugin", "ghcr.io/k8snetworkplumbingwg", "v3.11.0"), "config": _SRIOV_CONFIG,
    },
    "secondaryNetwork": {
        "multus": _image("multus-cni", "ghcr.io/k8snetworkplumbingwg", "v4.3.0"),
        "cniPlugins": _image("plugins", "ghcr.io/k8snetworkplumbingwg", "v1.5.0"),
    },
    "nvIpam": {**_image("nvidia-k8s-ipam", "ghcr.io/mellanox", "v0.3.7"), "enableWebhook": False},
}  # fmt: skip


def configured_scales() -> tuple[int, ...]:
    raw = os.environ.get(SCALES_ENV, "")
    return tuple(int(part) for part in raw.split(",") if part.strip()) or SCALES


# -- the simulator's process --------------------------------------------------------------------------------


def _sim_child(conn: Any, kubeconfig: str, nodes: int) -> None:
    """NIC nodes in a process of their own, with the stand-ins for the network operator's containers."""
    from gpu_operator.kube.restclient import ClusterAccess  # noqa: PLC0415 - only the child needs the simulator
    from gpu_operator.sim.control.simulator import Simulator  # noqa: PLC0415
    from gpu_operator.sim.kubelet.node import NodeOptions  # noqa: PLC0415
    from gpu_operator.sim.programs.standins import programs as standin_programs  # noqa: PLC0415
    from gpu_operator.sim.shapes import nic_node_requests  # noqa: PLC0415

    simulator = Simulator(access=ClusterAccess.from_kubeconfig(Path(kubeconfig)))
    for name, program in standin_programs().items():
        simulator.registry.register_program(name, program)
    simulator.start()
    begin = time.monotonic()
    simulator.add_nodes(nic_node_requests(nodes), options=NodeOptions(kubelet_grpc=False, gpu_plugin="local"))
    conn.send(time.monotonic() - begin)
    conn.recv()
    # The cluster is thrown away next: no need to delete thousands of pods and nodes one by one.
    # Its programs still write there until the process is gone: the parent removes it after the exit.
    conn.send(str(simulator.root))
    os._exit(0)


# -- the operator's process ---------------------------------------------------------------------------------


def _network_operator_child(conn: Any, kubeconfig: str, namespace: str) -> None:
    """The network operator as ``gpu-operator network-operator`` runs it, with a request counter on its client;
    answers ``stats`` with the keys ``operator_bench._OperatorProcess.idle`` reads."""
    from gpu_operator.kube.connect import async_client  # noqa: PLC0415 - imported in the child only
    from gpu_operator.reconcile.network.operator import NetworkOperator  # noqa: PLC0415

    counts: Counter[str] = Counter()

    async def count(request: Any) -> None:
        counts[_category(request.method, request.url.path, request.url.query.decode())] += 1

    async def main() -> None:
        client = async_client(kubeconfig=kubeconfig)
        client._client._client.event_hooks["request"].append(count)  # lightkube's httpx client sends everything
        operator = NetworkOperator(client=client, namespace=namespace)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def snapshot() -> dict[str, Any]:
            kube = operator.kube
            changes = {f"{i.kind} {dict(i.labels)}": i.changes for i in kube.informers} if kube else {}
            return {
                "requests": dict(counts), "passes": operator.reconcile_stats.passes,
                "failures": operator.reconcile_stats.failures, "upgrade_passes": operator.upgrade_stats.passes,
                "changes": changes, "upgrade_states": {}, "diffs": {},
            }  # fmt: skip

        def serve() -> None:  # the pipe is answered from a thread; the counters are read in the loop
            while True:
                if conn.recv() == "stats":
                    conn.send(asyncio.run_coroutine_threadsafe(snapshot(), loop).result(30))
                else:
                    loop.call_soon_threadsafe(stop.set)
                    return

        threading.Thread(target=serve, daemon=True).start()
        conn.send("started")
        try:
            await operator.run(stop=stop, leader_election=True)
        finally:
            await client.close()

    asyncio.run(main())
    conn.send("stopped")


# -- measuring ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NetScaleResult:
    nodes: int
    registered_s: float
    ready_s: float | None
    rolled_out_s: float | None
    peak_rss_mib: float
    peaks: dict[str, float]  # phase -> highest sampled RSS
    idle: Idle
    daemonsets: int
    deployments: int
    pods: int  # pods in the operator namespace (the operator runs outside the cluster)
    pods_at_ready: tuple[int, int]  # pods the DaemonSets wanted, and how many were available
    mofed_ready_nodes: int  # nodes labelled mofed.wait=false
    healthy_at_ready: int
    milestones: dict[str, float]  # MILESTONES key -> seconds from creating the policy
    early_plugins: int  # most RDMA plugin pods wanted beyond the OFED pods available, while becoming ready


def _policy_state(client: Client) -> str | None:
    obj: dict[str, Any] = client.get(NicClusterPolicyResource, net.NCP_NAME).to_dict()  # type: ignore[no-untyped-call]
    return (obj.get("status") or {}).get("state")


def _daemonset_status(client: Client) -> tuple[int, int, int, bool]:
    """DaemonSets in the namespace, pods they want, pods available, and whether all are observed and rolled out."""
    count = wanted = available = 0
    rolled_out = True
    for ds in client.list(DaemonSet, namespace=NETWORK_NAMESPACE):
        data = ds.to_dict()
        status, generation = data.get("status") or {}, int(data["metadata"].get("generation", 0))
        desired = int(status.get("desiredNumberScheduled") or 0)
        count, wanted, available = count + 1, wanted + desired, available + int(status.get("numberAvailable") or 0)
        rolled_out = rolled_out and (
            int(status.get("observedGeneration") or 0) >= generation
            and int(status.get("numberAvailable") or 0) == desired
            and int(status.get("updatedNumberScheduled") or 0) == desired
        )
    return count, wanted, available, rolled_out


#: Where the time to ready goes: the OFED pods, then the gate the operator opens behind them.
MILESTONES = {
    "ofed": "every OFED pod available",
    "gate": "every node `mofed.wait=false` (the RDMA plugin DaemonSet wants a pod on each)",
}


class _Progress:
    """Polled from the DaemonSets' status (cheap, unlike listing 1,000 Nodes): when each MILESTONES entry was
    last reached, and the most plugin pods wanted beyond the OFED pods available (gated plugins that were
    scheduled on nodes whose driver was not ready: should stay 0)."""

    def __init__(self, *, client: Client, nodes: int) -> None:
        self.client, self.nodes, self.begin = client, nodes, time.monotonic()
        self.reached: set[str] = set()
        self.times: dict[str, float] = {}
        self.early_plugins = 0

    def poll(self) -> None:
        ofed: list[tuple[int, int]] = []
        plugins = 0
        for ds in self.client.list(DaemonSet, namespace=NETWORK_NAMESPACE):
            data = ds.to_dict()
            state, status = (data["metadata"].get("labels") or {}).get(net.STATE_LABEL), data.get("status") or {}
            desired = int(status.get("desiredNumberScheduled") or 0)
            if state == net.STATE_OFED:
                ofed.append((desired, int(status.get("numberAvailable") or 0)))
            elif state == net.STATE_RDMA_DP:
                plugins = desired
        reached = {"gate"} if plugins == self.nodes else set()
        if sum(d for d, _ in ofed) == self.nodes and all(d == a for d, a in ofed):
            reached.add("ofed")
        for key in reached - self.reached:  # (re)reached now: a gate that closes again counts from its last opening
            self.times[key] = time.monotonic() - self.begin
        self.reached = reached
        self.early_plugins = max(self.early_plugins, plugins - sum(a for _, a in ofed))


def _mofed_ready_nodes(client: Client) -> int:
    return sum(1 for _ in client.list(Node, labels={net.MOFED_WAIT: "false"}))


def measure_scale(*, binaries: KubeBinaries, nodes: int, log: Callable[[str], None] = print) -> NetScaleResult:
    """One scale on a fresh cluster: nodes, the operator, the policy to ready, then one idle window."""
    spawn = multiprocessing.get_context("spawn")
    with LocalCluster(binaries=binaries) as cluster:
        client = cluster.client(field_manager="bench")
        install_crds(client=client, manifests=dict(network_crds()))
        client.create(Namespace(metadata=ObjectMeta(name=NETWORK_NAMESPACE)))
        kubeconfig = str(cluster.kubeconfig_path)
        sim, sim_end = spawn.Pipe()
        sim_process = spawn.Process(target=_sim_child, args=(sim_end, kubeconfig, nodes), daemon=True)
        sim_process.start()
        registered = float(sim.recv())
        log(f"network bench: {nodes} NIC nodes registered in {registered:.1f} s")

        operator = _OperatorProcess(kubeconfig=kubeconfig, target=_network_operator_child, namespace=NETWORK_NAMESPACE)
        time.sleep(5)  # leader election and the first pass with no policy
        policy = {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": net.NCP_NAME}}
        client.create(codecs.from_dict({**policy, "spec": POLICY_SPEC}))
        begin = time.monotonic()
        operator.phase = "policy to ready"
        progress = _Progress(client=client, nodes=nodes)

        def ready_yet() -> bool:
            progress.poll()
            return _policy_state(client) == "ready"

        ready = _wait(ready_yet, timeout=READY_TIMEOUT, interval=0.5)
        _wait(
            lambda: _policy_state(client) == "ready" and _daemonset_status(client)[3],
            timeout=READY_TIMEOUT - (time.monotonic() - begin),
            interval=1.0,
        )
        rolled_out = time.monotonic() - begin if _policy_state(client) == "ready" else None
        daemonsets, wanted, available, _ = _daemonset_status(client)
        deployments = len(list(client.list(Deployment, namespace=NETWORK_NAMESPACE)))
        pods = sum(1 for _ in client.list(Pod, namespace=NETWORK_NAMESPACE))
        mofed_ready, healthy = _mofed_ready_nodes(client), _healthy_nodes(client)
        log(
            f"network bench: ready after {ready} s, rolled out after {rolled_out} s, milestones {progress.times}, "
            f"at most {progress.early_plugins} RDMA plugin pods wanted beyond the OFED pods available"
        )
        log(f"network bench: {daemonsets} DaemonSets, {deployments} Deployments, {pods} pods, available/wanted "
            f"{available}/{wanted}, {mofed_ready} nodes mofed.wait=false, {healthy} healthy")  # fmt: skip
        operator.phase = "idle"
        idle = operator.idle()
        log(f"network bench: idle {idle.per_minute:.0f}/min, {idle.passes} passes, CPU {idle.cpu_percent:.1f} %: "
            f"{idle.requests}; informer changes {idle.changes}")  # fmt: skip
        peak, peaks = _memory_mib(operator.pid, "VmHWM"), dict(operator.peaks)
        log(f"network bench: RSS {idle.rss_mib:.0f} MiB, peak {peak:.0f} MiB, by phase {peaks}")
        operator.stop()
        sim.send("stop")
        sim_root = sim.recv()
        sim_process.join(timeout=120)
        if sim_process.is_alive():
            sim_process.kill()
            sim_process.join(timeout=10)
        shutil.rmtree(sim_root, ignore_errors=True)
        client.close()
    return NetScaleResult(
        nodes=nodes, registered_s=registered, ready_s=ready, rolled_out_s=rolled_out, peak_rss_mib=peak, peaks=peaks,
        idle=idle, daemonsets=daemonsets, deployments=deployments, pods=pods, pods_at_ready=(wanted, available),
        mofed_ready_nodes=mofed_ready, healthy_at_ready=healthy, milestones=progress.times,
        early_plugins=progress.early_plugins,
    )  # fmt: skip


def measure(
    *, binaries: KubeBinaries, scales: Sequence[int] = SCALES, log: Callable[[str], None] = print
) -> list[NetScaleResult]:
    return [measure_scale(binaries=binaries, nodes=n, log=log) for n in scales]


# -- the GPU operator's figures, the peer rows --------------------------------------------------------------


def gpu_rows_from_results(results: Sequence[Any]) -> dict[int, dict[str, str]]:
    """Peer figures from ``operator_bench.ScaleResult``s of this run."""
    out = {}
    for r in results:
        out[r.nodes] = {
            "ready": f"{r.ready_s:.1f}" if r.ready_s is not None else "not ready",
            "rss": f"{r.idle.rss_mib:.0f} / {r.peak_rss_mib:.0f}",
            "cpu": f"{r.idle.cpu_percent:.1f}",
            "requests": f"{r.idle.per_minute:.0f} ({r.idle.passes})",
        }
    return out


def gpu_rows_from_report(report: str) -> dict[int, dict[str, str]]:
    """Peer figures from the first table of the GPU operator's section in an existing BENCHMARKS.md."""
    chunk = next((c for c in report.split("\n## ") if c.startswith(GPU_SECTION)), "")
    table = [line for line in chunk.splitlines() if line.startswith("|")]
    if len(table) < 3:
        return {}
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    wanted = {"ready": "first `ready` s", "rss": "RSS / peak MiB", "cpu": "idle CPU %",
              "requests": "idle req/min (passes)"}  # fmt: skip
    if not set(wanted.values()) <= set(header):
        return {}
    out = {}
    for line in table[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != len(header) or not cells[0].replace(",", "").isdigit():
            break  # the end of the first table
        out[int(cells[0].replace(",", ""))] = {key: cells[header.index(col)] for key, col in wanted.items()}
    return out


# -- the report ---------------------------------------------------------------------------------------------


PEER_HEADER = ("operator", "nodes", "policy to `ready` s", "RSS / peak MiB", "idle CPU %", "idle req/min (passes)")


def markdown(results: Sequence[NetScaleResult], *, gpu: dict[int, dict[str, str]], gpu_source: str) -> str:
    header = [
        "nodes", "nodes registered s", "policy to `ready` s", "`ready` and rolled out s", "RSS / peak MiB",
        "idle CPU %", "idle req/min", "reconcile passes (upgrade passes)", "DaemonSets / Deployments", "pods",
        "pods available / wanted", "nodes `mofed.wait=false` / healthy",
    ]  # fmt: skip
    rows, breakdown, memory, peers, timeline = [], [], [], [], []
    for r in results:
        ready = f"{r.ready_s:.1f}" if r.ready_s is not None else "not ready"
        rolled = f"{r.rolled_out_s:.1f}" if r.rolled_out_s is not None else "not ready"
        rows.append([
            f"{r.nodes:,}", f"{r.registered_s:.1f}", ready, rolled, f"{r.idle.rss_mib:.0f} / {r.peak_rss_mib:.0f}",
            f"{r.idle.cpu_percent:.1f}", f"{r.idle.per_minute:.0f}", f"{r.idle.passes} ({r.idle.upgrade_passes})",
            f"{r.daemonsets} / {r.deployments}", f"{r.pods:,}", f"{r.pods_at_ready[1]:,} / {r.pods_at_ready[0]:,}",
            f"{r.mofed_ready_nodes:,} / {r.healthy_at_ready:,} of {r.nodes:,}",
        ])  # fmt: skip
        breakdown.append(f"- {r.nodes:,} nodes: {_requests(r.idle)}")
        steps = [f"{label} {r.milestones[key]:.1f}" for key, label in MILESTONES.items() if key in r.milestones]
        timeline.append(
            f"- {r.nodes:,} nodes: " + ", ".join([*steps, f"policy `ready` {ready}"])
            + f"; at most {r.early_plugins:,} RDMA plugin pods wanted beyond the OFED pods available"
        )  # fmt: skip
        memory.append(f"- {r.nodes:,} nodes: " + ", ".join(f"{phase} {mib:.0f}" for phase, mib in r.peaks.items()))
        peers.append([
            "network operator (this section)", f"{r.nodes:,}", ready, f"{r.idle.rss_mib:.0f} / {r.peak_rss_mib:.0f}",
            f"{r.idle.cpu_percent:.1f}", f"{r.idle.per_minute:.0f} ({r.idle.passes})",
        ])  # fmt: skip
        theirs = gpu.get(r.nodes)
        if theirs:
            peers.append(["GPU operator (ClusterPolicy)", f"{r.nodes:,}", theirs["ready"], theirs["rss"],
                          theirs["cpu"], theirs["requests"]])  # fmt: skip
        else:
            peers.append(["GPU operator (ClusterPolicy)", f"{r.nodes:,}", "n/a", "n/a", "n/a", "n/a"])
    return (
        "The network operator (`NetworkOperator.run` with leader election, in its own process, as "
        "`gpu-operator network-operator` runs it) against a fresh local control plane per scale, with simulated "
        "Mellanox NIC nodes (`sim.shapes.nic_node_requests`: CPU-only nodes split over the simulator's OS/kernel "
        "pools, so one OFED DaemonSet per pool) in a separate simulator process. The NicClusterPolicy "
        f"`{net.NCP_NAME}` has `ofedDriver`, `rdmaSharedDevicePlugin`, `sriovDevicePlugin`, "
        "`secondaryNetwork` (`multus`, `cniPlugins`) and `nvIpam`. Its containers run the simulator's network "
        "stand-ins, which keep the contracts: the OFED container loads for 0.5 s, writes `.driver-ready` and only "
        "then is Ready; the RDMA and SR-IOV plugins exit while it is missing. So `ready` covers the operator "
        "labelling each node `mofed.wait=false` after its OFED pod is Ready and the gated plugin DaemonSets "
        "rolling out behind it. *Nodes registered*: the simulator's Node and Lease creation. *Policy to `ready`*: "
        "from creating the policy to the first `status.state=ready`; *`ready` and rolled out*: until every "
        "DaemonSet in the namespace is also observed with all desired pods updated and available. *Pods*: every "
        "pod in the operator namespace then (the DaemonSets' and the nv-ipam controller's). RSS: `VmRSS` after "
        f"the idle window; peak: `VmHWM`. Idle: {IDLE_SECONDS:.0f} s starting {SETTLE_SECONDS:.0f} s after the "
        "rollout, CPU from `/proc/PID/stat` (100 % = one core), requests counted at the operator's HTTP client "
        "(reconcile, Lease renewals, informer lists and watch connections), passes of the `network` work key "
        "and, in brackets, of the `ofed-upgrade` one.\n\n"
        + _table(header, rows)
        + "\n\nWhere the time to `ready` goes (seconds from creating the policy, polled every 0.5 s; a gate "
        "that closed again counts from its last opening). The RDMA plugin pods wanted beyond the OFED pods "
        "available (`desiredNumberScheduled` of the RDMA DaemonSet minus `numberAvailable` of the OFED ones) "
        "count plugins scheduled on nodes whose driver was not ready, which the gate exists to prevent (the "
        "operator runs for 5 s before the policy is created, while the NIC nodes have no managed driver to wait "
        "for):\n\n"
        + "\n".join(timeline)
        + "\n\nIdle requests by verb and resource:\n\n"
        + "\n".join(breakdown)
        + "\n\nHighest RSS (MiB, sampled every 0.2 s) in each phase:\n\n"
        + "\n".join(memory)
        + "\n\nPeer comparison. NVIDIA's network operator (Go, `github.com/Mellanox/network-operator`) could not be "
        "run beside it here: the Go module proxy this machine reaches refuses the module (`go list -m -versions "
        'github.com/Mellanox/network-operator`: 403, "This module version is not available"), so it cannot be '
        "built from source here, and its images cannot be pulled. The peer row is therefore this project's GPU "
        f'operator at the same node counts, {gpu_source} (section "{GPU_SECTION}": a ClusterPolicy on GPU nodes, '
        "about 5.4 operand pods per node; the same three-process method, the same idle window). The idle "
        "figures compare like for like (one Lease renewed every 5 s, one resync a minute); ready times do not, "
        "as the GPU operands and their number per node differ.\n\n" + _table(PEER_HEADER, peers)
    )


def main(argv: Sequence[str] | None = None) -> int:
    from gpu_operator.localcluster.binaries import ALL_BINARIES, locate_binaries  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="The network operator at scale (prints the report section).")
    parser.add_argument("--scales", default=",".join(map(str, SCALES)), help="Node counts, comma separated.")
    args = parser.parse_args(argv)
    scales = [int(part) for part in args.scales.split(",") if part.strip()]
    results = measure(binaries=locate_binaries(required=ALL_BINARIES), scales=scales)
    report = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
    print(markdown(results, gpu=gpu_rows_from_report(report), gpu_source="as BENCHMARKS.md reports it"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
