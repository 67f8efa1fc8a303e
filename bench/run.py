"""Benchmarks of the project; writes BENCHMARKS.md.

Run as ``make bench`` (which exports ``GPU_OPERATOR_KUBE_BIN_DIR``) or
``.venv/bin/python bench/run.py --output BENCHMARKS.md``.

The report is a list of sections. Each benchmark is a function taking the shared :class:`BenchContext` and
returning a :class:`Section` (a title and a Markdown body); append new ones to ``SECTIONS``. ``--only NAME``
runs a subset (NAME is the function name without ``_section``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.localcluster.binaries import ALL_BINARIES, KubeBinaries, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.components import COMPONENTS

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Section:
    """One part of the report."""

    title: str
    body: str


@dataclass
class BenchContext:
    """What every benchmark may use."""

    binaries: KubeBinaries
    start_runs: int
    idle_seconds: float
    settle_seconds: float
    notes: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)  # section name -> its measurements, for later sections


SectionFunction = Callable[[BenchContext], Section]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- cluster start ----------------------------------------------------------------------------------------

MILESTONES = (
    ("etcd", "etcd `/health` ok"),
    ("kube-apiserver", "kube-apiserver `/readyz` ok"),
    ("kube-scheduler", "controller-manager and scheduler `/healthz` ok"),
    ("default-service-account", "`default/default` service account exists (cluster usable)"),
)


def _stats_row(label: str, values: Sequence[float]) -> list[str]:
    return [label, f"{statistics.median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"]


def cluster_start_section(ctx: BenchContext) -> Section:
    """Warm start (binaries built and cached by the OS): fresh credentials and etcd data every run."""
    with LocalCluster(binaries=ctx.binaries):  # warm-up run, not counted
        pass
    samples: dict[str, list[float]] = {key: [] for key, _ in MILESTONES}
    stops: list[float] = []
    for _ in range(ctx.start_runs):
        cluster = LocalCluster(binaries=ctx.binaries)
        cluster.start()
        for key, _ in MILESTONES:
            samples[key].append(cluster.timings[key])
        begin = time.monotonic()
        cluster.stop()
        stops.append(time.monotonic() - begin)
    rows = [_stats_row(label, samples[key]) for key, label in MILESTONES]
    rows.append(_stats_row("`stop()` (all processes exited)", stops))
    body = (
        f"Seconds from `LocalCluster.start()` to each milestone, {ctx.start_runs} runs after one warm-up run "
        "(each run generates new certificates and an empty etcd).\n\n"
        + _table(["milestone", "median s", "min s", "max s"], rows)
    )
    return Section(title="Local control plane: warm start", body=body)


# -- idle footprint ---------------------------------------------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15)


def _memory_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def idle_footprint_section(ctx: BenchContext) -> Section:
    """CPU and memory of each control-plane process while nothing uses the cluster."""
    with LocalCluster(binaries=ctx.binaries) as cluster:
        time.sleep(ctx.settle_seconds)
        pids = {name: process.pid for name, process in cluster.processes.items() if process.pid is not None}
        before = {name: _cpu_ticks(pid) for name, pid in pids.items()}
        begin = time.monotonic()
        time.sleep(ctx.idle_seconds)
        elapsed = time.monotonic() - begin
        after = {name: _cpu_ticks(pid) for name, pid in pids.items()}
        rss = {name: _memory_kib(pid, "VmRSS") for name, pid in pids.items()}
        peak = {name: _memory_kib(pid, "VmHWM") for name, pid in pids.items()}
    rows: list[list[str]] = []
    for name in COMPONENTS:
        if name not in pids:
            continue
        cpu = (after[name] - before[name]) / CLOCK_TICKS / elapsed * 100
        rows.append([name, f"{cpu:.1f}", f"{rss[name] / 1024:.0f}", f"{peak[name] / 1024:.0f}"])
    total_cpu = sum((after[n] - before[n]) for n in pids) / CLOCK_TICKS / elapsed * 100
    rows.append(
        ["**total**", f"{total_cpu:.1f}", f"{sum(rss.values()) / 1024:.0f}", f"{sum(peak.values()) / 1024:.0f}"]
    )
    body = (
        f"Each process's CPU time over {elapsed:.0f} s of idling (from `/proc/PID/stat`, 100 % = one core), "
        f"measured after the cluster had been ready for {ctx.settle_seconds:.0f} s; resident memory now "
        "(`VmRSS`) and at its peak (`VmHWM`) from `/proc/PID/status`.\n\n"
        + _table(["process", "CPU %", "RSS MiB", "peak RSS MiB"], rows)
    )
    return Section(title="Local control plane: idle footprint", body=body)


SECTIONS: list[SectionFunction] = [cluster_start_section, idle_footprint_section]


# -- simulated GPU nodes at scale -------------------------------------------------------------------------

SIM_GRPC_SPEC = "dgx-h100:5,a100-mig:5"  # full kubelet gRPC: Registration, PodResources, the GPU plugin over sockets
SIM_LOCAL_SPEC = "dgx-h100:300,hgx-h200:100,dgx-a100:100,pcie-l4:190,pcie-t4:100,a100-mig:100,cpu-only:100"
SIM_NODES = 1000
SIM_STEADY_SECONDS = 30.0
SIM_SETTLE_SECONDS = 10.0


def _sim_child(conn: Any, kubeconfig: str) -> None:
    """The simulator in a process of its own, so its CPU and memory can be measured alone."""
    from gpu_operator.kube.restclient import ClusterAccess  # noqa: PLC0415 - only the child needs the simulator
    from gpu_operator.sim.control.simulator import Simulator  # noqa: PLC0415
    from gpu_operator.sim.kubelet.node import NodeOptions  # noqa: PLC0415

    simulator = Simulator(access=ClusterAccess.from_kubeconfig(Path(kubeconfig)))
    simulator.start()
    conn.send("started")
    conn.recv()
    begin = time.monotonic()
    simulator.add_nodes(SIM_GRPC_SPEC, options=NodeOptions(kubelet_grpc=True, gpu_plugin="grpc"))
    simulator.add_nodes(SIM_LOCAL_SPEC, options=NodeOptions(kubelet_grpc=False, gpu_plugin="local"))
    conn.send(time.monotonic() - begin)
    conn.recv()
    stats = simulator.core.heartbeat.stats
    conn.send({"leases": stats.leases, "statuses": stats.statuses, "errors": stats.errors, "last": stats.last_error})
    begin = time.monotonic()
    simulator.stop(timeout=600)
    conn.send(time.monotonic() - begin)


class _NodeWatch:
    """Watches the simulated Nodes from the benchmark process: which are Ready and free of not-ready taints."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.healthy: set[str] = set()
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _update(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.seen.add(name)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
        tainted = any(t["key"].startswith("node.kubernetes.io/") for t in node.get("spec", {}).get("taints", []))
        (self.healthy.add if ready and not tainted else self.healthy.discard)(name)

    def _run(self) -> None:
        params = {"labelSelector": "gpu-operator.sim/node=true"}
        with self.cluster.http_client() as http:
            listing = http.get("/api/v1/nodes", params=params).json()
            for node in listing["items"]:
                self._update(node)
            version = listing["metadata"]["resourceVersion"]
            while not self.stop.is_set():
                query = {**params, "watch": "true", "resourceVersion": version, "timeoutSeconds": "5"}
                with http.stream("GET", "/api/v1/nodes", params=query, timeout=None) as response:
                    for line in response.iter_lines():
                        event = json.loads(line)
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._update(event["object"])
                            version = event["object"]["metadata"]["resourceVersion"]


def sim_scale_section(ctx: BenchContext) -> Section:
    """1,000 simulated nodes (10 with full kubelet gRPC): registration rate, then the simulator's steady cost."""
    spawn = multiprocessing.get_context("spawn")
    with LocalCluster(binaries=ctx.binaries) as cluster:
        parent, child_end = spawn.Pipe()
        child = spawn.Process(target=_sim_child, args=(child_end, str(cluster.kubeconfig_path)), daemon=True)
        child.start()
        assert parent.recv() == "started"
        assert child.pid is not None
        watch = _NodeWatch(cluster)
        watch.thread.start()
        begin = time.monotonic()
        parent.send("go")
        registered = float(parent.recv())
        while len(watch.healthy) < SIM_NODES and time.monotonic() - begin < 300:
            time.sleep(0.1)
        all_ready = time.monotonic() - begin
        time.sleep(SIM_SETTLE_SECONDS)
        pids = {"simulator": child.pid} | {n: p.pid for n, p in cluster.processes.items() if p.pid is not None}
        before = {name: _cpu_ticks(pid) for name, pid in pids.items()}
        start = time.monotonic()
        time.sleep(SIM_STEADY_SECONDS)
        elapsed = time.monotonic() - start
        cpu = {name: (_cpu_ticks(pid) - before[name]) / CLOCK_TICKS / elapsed * 100 for name, pid in pids.items()}
        rss, peak = _memory_kib(child.pid, "VmRSS"), _memory_kib(child.pid, "VmHWM")
        still_healthy = len(watch.healthy)
        parent.send("stats")
        stats = parent.recv()
        parent.send("stop")
        removed = float(parent.recv())
        child.join(timeout=60)
        watch.stop.set()
    rows = [
        ["nodes registered (Node + Lease created)", f"{registered:.1f} s", f"{SIM_NODES / registered:.0f} nodes/s"],
        [
            "all Ready, `not-ready` taint removed by the controller",
            f"{all_ready:.1f} s",
            f"{SIM_NODES / all_ready:.0f} nodes/s",
        ],
        ["all removed (pods stopped, Node and Lease deleted)", f"{removed:.1f} s", ""],
    ]
    steady = [[name, f"{value:.1f}"] for name, value in cpu.items()]
    body = (
        f"{SIM_NODES} simulated nodes in one simulator process on this machine: {SIM_GRPC_SPEC} with the full "
        "kubelet gRPC path (Registration and PodResources servers on unix sockets, the simulator's GPU plugin "
        f"registering over gRPC), the rest ({SIM_LOCAL_SPEC}) with the in-process plugin path. The benchmark "
        "watches the Nodes from its own process.\n\n"
        + _table(["phase", "seconds", "rate"], rows)
        + f"\n\nSteady state, {SIM_SETTLE_SECONDS:.0f} s after all were Ready, over {elapsed:.0f} s (100 % = one core; "
        f"control-plane processes for context). Simulator memory: RSS {rss / 1024:.0f} MiB, peak {peak / 1024:.0f} "
        f"MiB. Nodes still Ready and untainted at the end: {still_healthy}/{SIM_NODES}. Heartbeats sent by then: "
        f"{stats['leases']} Lease renewals, {stats['statuses']} status updates, {stats['errors']} errors.\n\n"
        + _table(["process", "CPU %"], steady)
    )
    return Section(title="Simulated GPU nodes: 1,000 nodes", body=body)


SECTIONS.append(sim_scale_section)


def device_plugin_section(ctx: BenchContext) -> Section:
    """Device plugin latencies over real gRPC against simulated GPUs (targets from issue [4/9])."""
    sys.path.insert(0, str(Path(__file__).parent))
    import deviceplugin_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    body = deviceplugin_bench.markdown(deviceplugin_bench.measure())
    note = (
        "Allocate: 2,000 calls of 2 GPUs; GetPreferredAllocation: 500 calls with random availability and sizes; "
        "XID: backend event to the Unhealthy list the kubelet receives (20 rounds); re-registration: kubelet "
        "restart (sockets deleted) to the next Register. Targets: Allocate p99 < 5 ms, preferred p99 < 20 ms, "
        "XID < 1 s, re-registration < 5 s (upstream: GetPreferredAllocation 16-30 s on 8 GPUs, "
        "NVIDIA/k8s-device-plugin#774; Kubernetes e2e allows 30 s for re-registration)."
    )
    return Section("Device plugin latencies", f"{note}\n\n{body}")


def exporter_section(ctx: BenchContext) -> Section:
    """The metrics exporter's memory, CPU per scrape and scrape latency (8 GPUs, 64 pods)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import exporter_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    return Section("Metrics exporter footprint", exporter_bench.markdown(exporter_bench.measure()))


def toolkit_mig_section(ctx: BenchContext) -> Section:
    """MIG reconfiguration cost on 8-GPU simulated nodes and the toolkit's no-change pass."""
    sys.path.insert(0, str(Path(__file__).parent))
    import toolkit_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    return Section("MIG manager and toolkit", toolkit_bench.markdown(toolkit_bench.measure()))


SECTIONS.extend([device_plugin_section, exporter_section, toolkit_mig_section])


def operator_scale_section(ctx: BenchContext) -> Section:
    """The operator at 100 and 1,000 simulated nodes: policy to ready, RSS, idle API requests, spec-change latency."""
    sys.path.insert(0, str(Path(__file__).parent))
    import operator_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    results = operator_bench.measure(binaries=ctx.binaries, log=log)
    ctx.results["operator_scale"] = results  # the network section's peer rows
    return Section("Operator at scale: 100 and 1,000 simulated nodes", operator_bench.markdown(results))


SECTIONS.append(operator_scale_section)


def driver_upgrade_section(ctx: BenchContext) -> Section:
    """A rolling driver upgrade of 100 simulated nodes, 10 at a time, against the ideal bound."""
    sys.path.insert(0, str(Path(__file__).parent))
    import upgrade_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    return Section("Rolling driver upgrade: 100 nodes", upgrade_bench.markdown(upgrade_bench.measure(ctx.binaries)))


SECTIONS.append(driver_upgrade_section)


def image_section(ctx: BenchContext) -> Section:
    """The product image: cold and warm `make image`, uncompressed and compressed size."""
    sys.path.insert(0, str(Path(__file__).parent))
    import image_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    section: Section = image_bench.image_section(ctx)
    return section


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _product_image() -> Path:
    """The image of this checkout (a warm build when nothing changed), as `make image` writes it."""
    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(repo / "hack" / "image" / "build.py")], cwd=repo, check=True, timeout=1800)
    return repo / "build" / "image" / "gpu-operator.oci.tar"


def real_nodes_section(ctx: BenchContext) -> Section:
    """Two real kubelet nodes: start to Ready, kubelet and containerd RSS, `helm install` to operator Ready."""
    sys.path.insert(0, str(Path(__file__).parent))
    import realnode_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    results = realnode_bench.measure(binaries=ctx.binaries, image=_product_image(), log=_log)
    return Section("Real nodes: start, footprint and helm install", realnode_bench.markdown(results))


def _build_times(script: Path) -> tuple[Path, list[tuple[str, int, str]], float]:
    """The bin dir a build script prints, the per-binary times its cold build recorded, and its warm time."""
    t0 = time.monotonic()
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True, timeout=3600).stdout
    warm = time.monotonic() - t0
    bin_dir = Path(out.strip().splitlines()[-1])
    record = bin_dir.parent / "build-times.tsv"
    rows = []
    if record.is_file():
        for line in record.read_text(encoding="utf-8").splitlines():
            name, seconds, when = line.split("\t")
            rows.append((name, int(seconds), when))
    return bin_dir, rows, warm


def builds_section(ctx: BenchContext) -> Section:
    """Cold builds of the control plane and the node binaries (as recorded by the build that filled the
    cache on this machine) and the warm path `make test` takes every time."""
    repo = Path(__file__).resolve().parents[1]
    rows: list[list[str]] = []
    notes = []
    for script in ("build-kube.sh", "build-node.sh"):
        bin_dir, times, warm = _build_times(repo / "hack" / script)
        rows += [[f"`{script}`: {name}", str(seconds), when] for name, seconds, when in times]
        total = sum(seconds for _, seconds, _ in times)
        rows.append([f"**`{script}` cold total**", f"**{total}**", ""])
        notes.append(f"`{script}` warm (everything cached, {bin_dir.name} in `{bin_dir.parent.name}`): {warm:.3f} s")
    body = (
        "Seconds per binary of the cold build that filled the cache here (Go module proxy downloads included, "
        "2 cores, one binary at a time; the node binaries after the control plane, so their Go build cache was "
        "warm; from an empty Go cache the kubelet alone took 554 s). Each script records its own timings in "
        "`build-times.tsv` beside the bin dir; this section reads them and times the warm path.\n\n"
        + _table(["binary", "cold s", "built (UTC)"], rows)
        + "\n\n"
        + "\n".join(f"- {note}" for note in notes)
    )
    return Section("Cold builds: control plane and node binaries", body)


def gpu_stack_section(ctx: BenchContext) -> Section:
    """Two real nodes with the fake NVIDIA driver: install to ready, operand memory, XID and MIG timings."""
    sys.path.insert(0, str(Path(__file__).parent))
    import gpustack_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    results = gpustack_bench.measure(binaries=ctx.binaries, image=_product_image(), log=_log)
    return Section("GPU stack on real nodes with the fake driver", gpustack_bench.markdown(results))


SECTIONS.extend([image_section, real_nodes_section, gpu_stack_section, builds_section])


def network_scale_section(ctx: BenchContext) -> Section:
    """The network operator at 100 and 1,000 simulated NIC nodes: policy to ready, RSS, CPU, idle API requests
    (``NETWORK_BENCH_SCALES=100`` runs fewer), beside the GPU operator's figures at the same node counts."""
    sys.path.insert(0, str(Path(__file__).parent))
    import network_bench  # noqa: PLC0415 - a sibling module, imported when this section runs

    results = network_bench.measure(binaries=ctx.binaries, scales=network_bench.configured_scales(), log=_log)
    if "operator_scale" in ctx.results:
        gpu, source = network_bench.gpu_rows_from_results(ctx.results["operator_scale"]), "measured in this run"
    else:
        report = network_bench.REPORT.read_text(encoding="utf-8") if network_bench.REPORT.exists() else ""
        gpu, source = network_bench.gpu_rows_from_report(report), "as this report's earlier run of it gives it"
    body = network_bench.markdown(results, gpu=gpu, gpu_source=source)
    return Section("Network operator at scale: 100 and 1,000 simulated NIC nodes", body)


SECTIONS.append(network_scale_section)


def fleet_scale_section(ctx: BenchContext) -> Section:
    """Our operator at 1,000, 2,500 and 5,000 simulated GPU nodes on a control plane tuned as a large cluster
    (``FLEET_BENCH_SCALES=50,100`` runs fewer, ``FLEET_BENCH_NODES_PER_SIM`` sets nodes per simulator process,
    ``FLEET_BENCH_PLOT`` writes the plot elsewhere than ``docs/bench/fleet-scale.png``)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import fleet_bench  # noqa: PLC0415 - sibling modules, imported when this section runs
    import fleet_report  # noqa: PLC0415

    results = fleet_bench.measure(binaries=ctx.binaries, scales=fleet_bench.configured_scales(), log=_log)
    ctx.results["fleet_scale"] = results
    earlier: dict[int, Any] = {}
    if os.environ.get("FLEET_BENCH_KEEP_EARLIER") == "1":
        import fleet_earlier  # noqa: PLC0415

        report = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
        earlier = fleet_earlier.earlier_scales(report.read_text(encoding="utf-8") if report.exists() else "")
    fleet_report.write_plot(results, path=fleet_report.plot_path(), earlier=earlier)
    measured = {r.nodes for r in results}
    kept = sorted(n for n in earlier if n not in measured)
    scales = " and ".join(f"{n:,}" for n in sorted([*measured, *kept]))
    store = os.environ.get("FLEET_BENCH_STORE")
    provenance = (
        f"Scales {scales}, each measured once (with `FLEET_BENCH_STORE={store}` a scale measured by an earlier "
        "invocation is read back from that file instead of measured again).\n\n"
        if store
        else ""
    )
    if kept:
        provenance += (
            f"Measured in this run: {' and '.join(f'{n:,}' for n in sorted(measured))} nodes. Kept from the "
            f"previous report (`FLEET_BENCH_KEEP_EARLIER=1`, `bench/fleet_earlier.py`): "
            f"{' and '.join(f'{n:,}' for n in kept)} nodes, their rows, tables and plot points as that run wrote "
            "them; the commit column says which code each scale ran.\n\n"
        )
    body = provenance + fleet_report.markdown(results, earlier=earlier)
    return Section(f"Operator at fleet scale: {scales} simulated GPU nodes", body)


SECTIONS.append(fleet_scale_section)


def pass_profile_section(ctx: BenchContext) -> Section:
    """The operator's CPU per spec change at 1,000, 2,500 and 5,000 nodes over the in-memory API, split by step
    of a pass (``PASS_PROFILE_SCALES=100,200`` runs others)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import pass_profile  # noqa: PLC0415 - a sibling module, imported when this section runs

    wanted = os.environ.get("PASS_PROFILE_SCALES")
    scales = tuple(int(n) for n in wanted.split(",")) if wanted else pass_profile.SCALES
    results = pass_profile.measure(scales, log=_log)
    title = " and ".join(f"{r.nodes:,}" for r in results)
    return Section(f"Where a pass's CPU goes: {title} nodes, the operator alone", pass_profile.markdown(results))


SECTIONS.append(pass_profile_section)


def peer_operators_section(ctx: BenchContext) -> Section:
    """Ours and NVIDIA's gpu-operator (built from the Go module proxy) on identical clusters and nodes."""
    sys.path.insert(0, str(Path(__file__).parent))
    import nvidia_operator  # noqa: PLC0415 - a sibling module, imported when this section runs
    import peer_bench  # noqa: PLC0415

    nodes = int(os.environ.get("PEER_BENCH_NODES", "100"))
    results = peer_bench.measure(binaries=ctx.binaries, nodes=nodes, log=_log)
    ctx.results["peer_operators"] = results
    body = (
        peer_bench.describe(nodes=nodes)
        + "\n\n"
        + peer_bench.markdown(results, nodes=nodes, nvidia_version=nvidia_operator.NVIDIA_VERSION)
    )
    return Section(f"Ours beside NVIDIA's gpu-operator: {nodes} simulated GPU nodes, one run", body)


SECTIONS.append(peer_operators_section)


def peer_targets_section(ctx: BenchContext) -> Section:
    """Met or missed for each target against NVIDIA's operator, from the peer table (this run's, or the
    report's when ``--only peer_targets`` runs alone)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import peer_bench  # noqa: PLC0415 - sibling modules, imported when this section runs
    import peer_targets  # noqa: PLC0415

    if "peer_operators" in ctx.results:
        text = peer_bench.markdown(ctx.results["peer_operators"], nodes=0, nvidia_version="")
        rows = peer_targets.rows_from_report(f"\n## {peer_targets.PEER_SECTION}\n{text}")
    else:
        report = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
        rows = peer_targets.rows_from_report(report.read_text(encoding="utf-8") if report.exists() else "")
    return Section("Targets against NVIDIA's operator", peer_targets.markdown(rows))


SECTIONS.append(peer_targets_section)


# -- report -----------------------------------------------------------------------------------------------


def _machine() -> str:
    meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").splitlines()
    total_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")), 0)
    model = ""
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return (
        f"{os.cpu_count()} CPUs ({model or platform.machine()}), {total_kib / 1024 / 1024:.1f} GiB memory, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def _command() -> str:
    executable = Path(sys.executable)
    try:
        shown = str(executable.relative_to(Path.cwd()))
    except ValueError:
        shown = str(executable)
    return shlex.join([shown, *sys.argv])


def render_report(*, sections: Sequence[Section], ctx: BenchContext, seconds: float) -> str:
    """The whole BENCHMARKS.md."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py`; do not edit by hand. Regenerate with `make bench`.",
        "",
        f"- Date: {now}",
        f"- Machine: {_machine()}",
        f"- Binaries: `{ctx.binaries.bin_dir}` (from {ctx.binaries.source})",
        f"- Command: `{_command()}` (took {seconds:.0f} s)",
    ]
    parts += [f"- Note: {note}" for note in ctx.notes]
    for section in sections:
        parts += ["", f"## {section.title}", "", section.body]
    return "\n".join(parts) + "\n"


def _title_key(title: str) -> str:
    """A section's title without its figures: one measured at other scales ("1,000 and 2,500 nodes" then
    "1,000 and 2,500 and 5,000 nodes") replaces the earlier one instead of standing beside it."""
    return re.sub(r"\d[\d,.]*(?: and \d[\d,.]*)*", "#", title)


def _merge_previous(*, sections: list[Section], previous: str, ctx: BenchContext) -> list[Section]:
    """``--only`` into an existing report: the sections run now replace those of the same title, the others
    are kept (in their order, new ones last), so one benchmark can be re-run without dropping the rest."""
    fresh = {_title_key(section.title): section for section in sections}
    kept: list[Section] = []
    for chunk in previous.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        key = _title_key(title)
        kept.append(fresh.pop(key) if key in fresh else Section(title=title, body=body.strip("\n")))
    if any(section.title not in {s.title for s in sections} for section in kept):
        ctx.notes.append("sections not named by `--only` are kept from the previous report")
    return kept + list(fresh.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, required=True, help="Markdown file to write (BENCHMARKS.md).")
    parser.add_argument("--runs", type=int, default=5, help="Measured cluster starts (default 5).")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="Idle sampling window (default 20).")
    parser.add_argument("--settle-seconds", type=float, default=10.0, help="Wait before idle sampling (default 10).")
    names = [f.__name__.removesuffix("_section") for f in SECTIONS]
    parser.add_argument("--only", action="append", choices=names, help="Run only these sections (repeatable).")
    args = parser.parse_args(argv)

    ctx = BenchContext(
        binaries=locate_binaries(required=ALL_BINARIES),
        start_runs=args.runs,
        idle_seconds=args.idle_seconds,
        settle_seconds=args.settle_seconds,
    )
    begin = time.monotonic()
    sections: list[Section] = []
    for function in SECTIONS:
        name = function.__name__.removesuffix("_section")
        if args.only and name not in args.only:
            continue
        print(f"bench: {name}…", file=sys.stderr, flush=True)
        sections.append(function(ctx))
    if args.only and args.output.exists():
        sections = _merge_previous(sections=sections, previous=args.output.read_text(encoding="utf-8"), ctx=ctx)
    report = render_report(sections=sections, ctx=ctx, seconds=time.monotonic() - begin)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
