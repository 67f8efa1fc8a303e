"""Our operator on a fleet: 1,000, 2,500 and 5,000 simulated GPU nodes on a control plane tuned as a large one.

Per scale, a fresh local control plane (flags in :data:`CONTROL_PLANE_FLAGS`, each with its reason), the
simulated nodes spread over several simulator processes (:data:`NODES_PER_SIM` each, unique name prefixes and
node indexes), and the operator in a process of its own (``operator_bench``'s ``_OperatorProcess``, with its
request counter). Measured: registration, policy to ``ready`` and to rolled out, the operator's CPU seconds
for it, RSS idle and peak, idle API requests, spec-change latency, the upgrade controller's pass time
(``Operator.upgrade_pass_seconds``), and the CPU and RSS of every process of the machine's share of the run in
every phase (:class:`~fleet_sample.ProcessSampler`), to show where the machine, not the operator, is the limit.

``FLEET_BENCH_SCALES=50,100`` runs other scales; ``FLEET_BENCH_NODES_PER_SIM`` sets the nodes per simulator
process (1,250: one process per 1,250 nodes). The report and the plot are ``fleet_report``'s.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import operator_bench as ob
from fleet_sample import PhaseUsage, ProcessSampler
from lightkube import codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.sim.objects import node_healthy
from gpu_operator.sim.shapes import parse_node_spec

SCALES = (1000, 2500, 5000)
SCALES_ENV = "FLEET_BENCH_SCALES"
NODES_PER_SIM_ENV = "FLEET_BENCH_NODES_PER_SIM"
NODES_PER_SIM = 1250
#: Kubelet-like heartbeats of a large cluster on two cores: a Lease renewal every 40 s (4x the kubelet's
#: 10 s: 5,000 nodes at 10 s would be 500 writes/s, the whole machine) and the full status every 5 minutes
#: (the kubelet's nodeStatusReportFrequency).
LEASE_INTERVAL = 40.0
STATUS_INTERVAL = 300.0
HEALTHY_TIMEOUT = 900.0
READY_TIMEOUT = 3600.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: Component -> (flags, why). Appended to ``gpu_operator.localcluster.components``' own flags.
CONTROL_PLANE_FLAGS: dict[str, list[tuple[str, str]]] = {
    "etcd": [
        ("--quota-backend-bytes=8589934592", "8 GiB instead of 2 GiB: tens of thousands of pods and their status "
         "history between compactions must not fill the backend (etcd then refuses writes: NOSPACE alarm)"),
    ],
    "kube-apiserver": [
        ("--max-requests-inflight=1500", "3.75x the default 400 (the sum of both is the priority-and-fairness "
         "concurrency): the operator's, the controllers' and several simulators' lists of thousands of objects "
         "must queue, not be rejected with 429"),
        ("--max-mutating-requests-inflight=500", "2.5x the default 200: Lease renewals, pod creations, bindings "
         "and pod status writes of thousands of nodes at once (managed services give 500 at 1,000 nodes)"),
    ],
    "kube-controller-manager": [
        ("--node-monitor-grace-period=200s", "5 Lease renewals of 40 s, as the default 50 s is 5 renewals of the "
         "kubelet's 10 s: a node is declared unreachable only after the same number of missed renewals"),
        ("--node-monitor-period=20s", "the node-lifecycle controller's scan of every node, scaled with the "
         "renewal interval (default 5 s against 10 s renewals)"),
        ("--concurrent-daemonset-syncs=8", "default 2: the policy's seven or eight DaemonSets roll out at once, "
         "each sync walking every node; with 2 workers they queue behind each other"),
    ],
    "kube-scheduler": [
        ("--kube-api-qps=500", "default 50: every DaemonSet pod is bound by the scheduler (one binding and one "
         "event each); at 50/s, 27,000 pods take 9 minutes on the client rate limit alone"),
        ("--kube-api-burst=1000", "default 100, with the QPS above"),
    ],
}  # fmt: skip


def control_plane_args() -> dict[str, list[str]]:
    return {component: [flag for flag, _ in flags] for component, flags in CONTROL_PLANE_FLAGS.items()}


def configured_scales() -> tuple[int, ...]:
    raw = os.environ.get(SCALES_ENV, "")
    return tuple(int(part) for part in raw.split(",") if part.strip()) or SCALES


def nodes_per_sim() -> int:
    return int(os.environ.get(NODES_PER_SIM_ENV) or NODES_PER_SIM)


def sim_specs(*, nodes: int, sims: int) -> list[str]:
    """``nodes`` in operator_bench's mix (90 % GPU nodes), each profile's count split evenly over ``sims``."""
    counts = {profile: share * nodes // 100 for profile, share in ob.MIX_PER_100.items()}
    counts[next(iter(counts))] += nodes - sum(counts.values())  # the rounding remainder: DGX H100 nodes
    specs: list[list[str]] = [[] for _ in range(sims)]
    for profile, count in counts.items():
        each, extra = divmod(count, sims)
        for k in range(sims):
            if each + (k < extra):
                specs[k].append(f"{profile}:{each + (k < extra)}")
    return [",".join(parts) for parts in specs if parts]


def _fleet_sim_child(conn: Any, kubeconfig: str, spec: str, index: int, offset: int) -> None:
    """One simulator process of the fleet: stub operands, unique names and indexes, large-cluster heartbeats."""
    from gpu_operator.kube.restclient import ClusterAccess  # noqa: PLC0415 - only the child needs the simulator
    from gpu_operator.sim.control.simulator import Simulator  # noqa: PLC0415
    from gpu_operator.sim.kubelet.node import NodeOptions  # noqa: PLC0415
    from gpu_operator.sim.programs.programs import default_registry  # noqa: PLC0415

    registry = default_registry()
    for name in ob.STUB_PROGRAMS:
        registry.register_program(name, ob._stub)
    simulator = Simulator(
        access=ClusterAccess.from_kubeconfig(Path(kubeconfig)), registry=registry, name_prefix=f"sim{index}",
        lease_interval=LEASE_INTERVAL, status_interval=STATUS_INTERVAL, index_offset=offset,
    )  # fmt: skip
    simulator.start()
    conn.send("started")
    begin = time.monotonic()
    simulator.add_nodes(spec, options=NodeOptions(kubelet_grpc=False, gpu_plugin="local"), timeout=1800)
    conn.send(time.monotonic() - begin)
    while conn.recv() == "stats":
        stats = simulator.core.heartbeat.stats
        conn.send({"leases": stats.leases, "statuses": stats.statuses, "errors": stats.errors})
    shutil.rmtree(simulator.root, ignore_errors=True)  # the cluster is thrown away: no deleting node by node
    conn.send("bye")
    os._exit(0)


@dataclass(frozen=True, kw_only=True)
class FleetResult:
    nodes: int
    sims: int
    registered_s: float  # every simulator's nodes created
    healthy_s: float | None  # every node Ready and untainted
    ready_s: float | None
    rolled_out_s: float | None
    cpu_to_rolled_out_s: float  # the operator's CPU seconds from the policy's creation to rolled out
    rss_idle_mib: float
    peak_rss_mib: float
    peaks: dict[str, float]  # operator phase -> highest sampled RSS
    idle: ob.Idle
    change_latencies: list[float]
    change_timeouts: int
    upgrade_passes: dict[str, list[float]]  # phase -> seconds of each upgrade pass in it
    usage: dict[str, PhaseUsage]  # phase -> every process's CPU and peak RSS
    healthy_at_ready: int
    healthy_at_end: int
    pods_at_ready: tuple[int, int]
    heartbeat_errors: int
    #: The commit measured (``git describe``-like: a ``+`` when the tree had changes); results kept in a
    #: store across commits say which code each scale ran.
    commit: str = ""
    #: The operator's RSS growth steps (``operator_bench._witness_memory``), each with the phase it fell in.
    growth: list[dict[str, Any]] = field(default_factory=list)


def source_commit() -> str:
    """The repository's commit, ``+`` when its code differs from it; "" outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        # Only the code counts: the bench itself rewrites BENCHMARKS.md and the plot under docs/.
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                "src", "bench", "pyproject.toml"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+" if dirty else "")


class _Sims:
    """The simulator processes of one scale."""

    def __init__(self, *, kubeconfig: str, specs: Sequence[str]) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.pipes, self.processes = [], []
        offset = 0  # node indexes (so node and pod addresses) of each simulator follow the previous one's
        for index, spec in enumerate(specs):
            parent, child = spawn.Pipe()
            args = (child, kubeconfig, spec, index, offset)
            offset += sum(r.count for r in parse_node_spec(spec))
            process = spawn.Process(target=_fleet_sim_child, args=args, daemon=True)
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)
        for pipe in self.pipes:
            if pipe.recv() != "started":
                raise RuntimeError("a simulator process did not start")

    @property
    def pids(self) -> dict[str, int]:
        return {f"sim{k}": p.pid for k, p in enumerate(self.processes) if p.pid is not None}

    def registered(self) -> float:
        return max(float(pipe.recv()) for pipe in self.pipes)

    def heartbeat_errors(self) -> int:
        for pipe in self.pipes:
            pipe.send("stats")
        return sum(int(pipe.recv()["errors"]) for pipe in self.pipes)

    def stop(self) -> None:
        for pipe in self.pipes:
            pipe.send("stop")
        for process in self.processes:
            process.join(timeout=120)
            if process.is_alive():
                process.kill()


def _healthy_nodes(cluster: LocalCluster) -> int:
    """Nodes Ready and untainted, from the raw list: lightkube's models of 5,000 Nodes cost the bench seconds."""
    with cluster.http_client() as http:
        listing = http.get("/api/v1/nodes", timeout=120).json()
    return sum(node_healthy(node) for node in listing["items"])


def _passes_since(stats: dict[str, Any], count: int) -> tuple[list[float], int]:
    """The upgrade passes' seconds after the first ``count``, and how many there are now."""
    seconds: list[float] = stats["upgrade_pass_seconds"]
    return seconds[count:], len(seconds)


@dataclass(frozen=True, kw_only=True)
class _Rollout:
    ready_s: float | None
    rolled_out_s: float | None
    cpu_s: float
    passes: list[float]


def _rollout(*, client: Any, operator: ob._OperatorProcess, sampler: ProcessSampler) -> _Rollout:
    """Create the ClusterPolicy; wait for ``ready`` and for every DaemonSet rolled out."""
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": ob.POLICY}}
    ticks, (_, seen) = ob._cpu_ticks(operator.pid), _passes_since(operator.stats(), 0)
    client.create(codecs.from_dict({**policy, "spec": ob.POLICY_SPEC}))
    begin = time.monotonic()
    operator.phase = sampler.phase = "policy to ready"
    ready = ob._wait(lambda: ob._policy_state(client) == "ready", timeout=READY_TIMEOUT, interval=0.5)
    done = ob._wait(
        lambda: ob._policy_state(client) == "ready" and ob._rolled_out(client),
        timeout=READY_TIMEOUT - (time.monotonic() - begin), interval=2.0,
    )  # fmt: skip
    rolled_out = None if done is None else time.monotonic() - begin  # a timeout is "not reached", not a time
    cpu = (ob._cpu_ticks(operator.pid) - ticks) / CLOCK_TICKS
    passes, _ = _passes_since(operator.stats(), seen)
    return _Rollout(ready_s=ready, rolled_out_s=rolled_out, cpu_s=cpu, passes=passes)


def _stopped(operator: ob._OperatorProcess) -> list[dict[str, Any]]:
    """Stop the operator; its RSS growth steps, each with the bench's phase at that moment."""
    growth = [{**step, "phase": operator.phase_at(step["at"])} for step in operator.stats().get("growth", [])]
    operator.stop()
    return growth


def measure_scale(*, binaries: KubeBinaries, nodes: int, log: Callable[[str], None] = print) -> FleetResult:
    """One scale on a fresh, tuned control plane (the order of ``operator_bench.measure_scale``)."""
    sims_count = max(1, math.ceil(nodes / nodes_per_sim()))
    os.environ["OPERATOR_BENCH_DIFFS"] = "0"  # the spawned operator records no field diffs (operator_bench)
    with LocalCluster(binaries=binaries, extra_args=control_plane_args()) as cluster:
        client = cluster.client(field_manager="bench")
        install_crds(client=client)
        client.create(Namespace(metadata=ObjectMeta(name=ob.NAMESPACE)))
        kubeconfig = str(cluster.kubeconfig_path)
        pids = {name: p.pid for name, p in cluster.processes.items() if p.pid is not None} | {"bench": os.getpid()}
        sampler = ProcessSampler(pids=pids)
        begin = time.monotonic()
        sims = _Sims(kubeconfig=kubeconfig, specs=sim_specs(nodes=nodes, sims=sims_count))
        sampler.add(sims.pids)
        sampler.phase = "register"
        registered = sims.registered()
        healthy = ob._wait(lambda: _healthy_nodes(cluster) >= nodes, timeout=HEALTHY_TIMEOUT, interval=5.0)
        healthy_s = None if healthy is None else time.monotonic() - begin
        log(f"fleet bench: {nodes} nodes, {sims_count} simulators: registered {registered:.1f} s, healthy {healthy_s}")

        operator = ob._OperatorProcess(kubeconfig=kubeconfig)
        sampler.add({"operator": operator.pid})
        sampler.phase = "operator start"
        time.sleep(5)
        rollout = _rollout(client=client, operator=operator, sampler=sampler)
        healthy_at_ready, pods_at_ready = _healthy_nodes(cluster), ob._pods_wanted(client)
        log(
            f"fleet bench: ready {rollout.ready_s} s, rolled out {rollout.rolled_out_s} s, operator CPU "
            f"{rollout.cpu_s:.1f} s, {len(rollout.passes)} upgrade passes, pods available/wanted {pods_at_ready}"
        )
        operator.phase = sampler.phase = "idle"
        seen = len(operator.stats()["upgrade_pass_seconds"])
        idle = operator.idle()
        passes = {"policy to ready": rollout.passes, "idle": _passes_since(operator.stats(), seen)[0]}
        log(f"fleet bench: idle {idle.per_minute:.0f}/min, RSS {idle.rss_mib:.0f} MiB: {idle.requests}")
        peak, peaks = ob._memory_mib(operator.pid, "VmHWM"), dict(operator.peaks)
        growth = _stopped(operator)

        operator = ob._OperatorProcess(kubeconfig=kubeconfig)
        sampler.add({"operator": operator.pid})
        operator.phase = sampler.phase = "restart"
        time.sleep(20)
        # Changes land on a warm operator, as in the peer bench: informers synced and a first pass done.
        ob._wait(lambda: operator.stats()["passes"] >= 1, timeout=600, interval=1.0)
        time.sleep(5)
        operator.phase = sampler.phase = "spec changes"
        latencies, timeouts = ob._spec_changes(client)
        passes["spec changes"] = operator.stats()["upgrade_pass_seconds"]
        log(f"fleet bench: spec change latencies {[round(x, 2) for x in latencies]}, {timeouts} timeouts")
        peak = max(peak, ob._memory_mib(operator.pid, "VmHWM"))
        peaks.update(operator.peaks)
        growth += _stopped(operator)
        healthy_at_end, errors = _healthy_nodes(cluster), sims.heartbeat_errors()
        usage = sampler.stop()
        sims.stop()
        client.close()
    return FleetResult(
        nodes=nodes, sims=sims_count, registered_s=registered, healthy_s=healthy_s, ready_s=rollout.ready_s,
        rolled_out_s=rollout.rolled_out_s, cpu_to_rolled_out_s=rollout.cpu_s, rss_idle_mib=idle.rss_mib,
        peak_rss_mib=peak, peaks=peaks, idle=idle, change_latencies=latencies, change_timeouts=timeouts,
        upgrade_passes=passes, usage=usage, healthy_at_ready=healthy_at_ready, healthy_at_end=healthy_at_end,
        pods_at_ready=pods_at_ready, heartbeat_errors=errors, commit=source_commit(), growth=growth,
    )  # fmt: skip


def measure(
    *, binaries: KubeBinaries, scales: Sequence[int] = SCALES, log: Callable[[str], None] = print
) -> list[FleetResult]:
    """Each scale in turn. With ``FLEET_BENCH_STORE=FILE`` every finished scale is kept in FILE (pickle) and a
    scale already there is reused, so a run cut short (an hour at 5,000 nodes) loses only the scale under way."""
    store = Path(os.environ["FLEET_BENCH_STORE"]) if os.environ.get("FLEET_BENCH_STORE") else None
    kept: dict[int, FleetResult] = pickle.loads(store.read_bytes()) if store and store.exists() else {}
    out = []
    for nodes in scales:
        if nodes in kept:
            log(f"fleet bench: {nodes} nodes reused from {store}")
        else:
            kept[nodes] = measure_scale(binaries=binaries, nodes=nodes, log=log)
            if store is not None:
                store.write_bytes(pickle.dumps(kept))
        out.append(kept[nodes])
    return out
