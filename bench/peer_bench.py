"""Our operator and NVIDIA's, one after the other, on identical fresh control planes and simulated nodes.

For each operator: a fresh :class:`LocalCluster` whose API server keeps an audit log of the operator's
ServiceAccount (``bench/audit.py``: both are counted at the server, the same way), the same simulated
nodes on one OS in a simulator process (operand pods: NVIDIA's containers by the cheap stand-ins of
``nvidia_operator.light_standins``, which honour the validation files; our agents by the stub of
``operator_bench``), the operator in its own process, and the same ClusterPolicy: the spec NVIDIA's chart
values give (``nvidia_operator.NVIDIA_POLICY_SPEC``), which our operator renders with NVIDIA's images and
contracts, so both roll out the same DaemonSets and pods. Then, on the same operator process:

1. policy created -> ``status.state=ready``, and -> every DaemonSet observed, updated and available;
   the operator's CPU seconds until ``ready``;
2. an idle window: requests by verb and resource (audit log), CPU, RSS;
3. spec changes (``dcgmExporter.version``) -> the DaemonSet's template carries the new image, p50/p99;
4. a rolling driver upgrade (``driver.version``) of every node with ``maxParallelUpgrades`` 10 ->
   every node ``upgrade-done`` with a driver pod of the new version Ready.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nvidia_operator as nv
import operator_bench as ob
from audit import AuditLog, audit_args, operator_kubeconfig
from lightkube import Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.sim.nics import OsPool
from gpu_operator.sim.shapes import NodeRequest

NAMESPACE = ob.NAMESPACE
OS = OsPool(os_id="ubuntu", os_version_id="22.04", kernel_version="5.15.0-105-generic")
GPU_MIX_PER_100 = {"dgx-h100": 35, "hgx-h200": 10, "dgx-a100": 10, "pcie-l4": 25, "pcie-t4": 10, "a100-mig": 10}
UPGRADE_TIMEOUT = 1200.0
#: Four of our idle resyncs (60 s) and two of NVIDIA's requeues (2 min): a shorter window would count
#: one operator's periodic work whole and the other's by chance (``PEER_BENCH_IDLE_SECONDS`` to change).
IDLE_SECONDS = float(os.environ.get("PEER_BENCH_IDLE_SECONDS") or 240.0)
OPERATORS = ("ours", "nvidia")


def node_requests(nodes: int) -> list[NodeRequest]:
    """``nodes`` GPU nodes of several profiles, all on one OS (NVIDIA's operator takes the driver image's
    OS tag from whichever GPU node it lists first: mixed OSes make it flip between tags forever)."""
    return [NodeRequest(profile=p, count=c * nodes // 100, os_pool=OS) for p, c in GPU_MIX_PER_100.items()]


def _sim_child(conn: Any, kubeconfig: str, requests: list[NodeRequest]) -> None:
    """The simulated nodes: the same programs registered for both operators."""
    from gpu_operator.kube.restclient import ClusterAccess  # noqa: PLC0415 - the child's imports
    from gpu_operator.sim.control.simulator import Simulator  # noqa: PLC0415
    from gpu_operator.sim.kubelet.node import NodeOptions  # noqa: PLC0415
    from gpu_operator.sim.programs.programs import default_registry  # noqa: PLC0415

    registry = default_registry()
    for name in ob.STUB_PROGRAMS:
        registry.register_program(name, ob._stub)
    for name, program in nv.light_standins().items():
        registry.register_program(name, program)
    simulator = Simulator(access=ClusterAccess.from_kubeconfig(Path(kubeconfig)), registry=registry)
    simulator.start()
    begin = time.monotonic()
    simulator.add_nodes(requests, options=NodeOptions(kubelet_grpc=False, gpu_plugin="local"))
    conn.send(time.monotonic() - begin)
    conn.recv()
    conn.send("bye")


@dataclass(kw_only=True)
class PeerResult:
    operator: str
    nodes: int
    ready_s: float | None = None
    rolled_out_s: float | None = None
    cpu_to_ready_s: float | None = None
    cpu_to_rolled_out_s: float | None = None
    idle_cpu_percent: float = 0.0
    idle_seconds: float = 0.0
    idle_requests: dict[str, int] = field(default_factory=dict)
    rollout_requests: int = 0
    rss_idle_mib: float = 0.0
    rss_peak_mib: float = 0.0
    change_latencies: list[float] = field(default_factory=list)
    change_timeouts: int = 0
    change_cpu_s: float = 0.0
    change_requests: int = 0
    upgrade_s: float | None = None
    upgrade_cpu_s: float = 0.0
    upgrade_requests: int = 0
    rollout_cpu_by_process: dict[str, float] = field(default_factory=dict)  # CPU s, policy -> rolled out
    notes: list[str] = field(default_factory=list)

    @property
    def idle_per_minute(self) -> float:
        return sum(self.idle_requests.values()) / self.idle_seconds * 60 if self.idle_seconds else 0.0


def _cpu_s(pid: int) -> float:
    return ob._cpu_ticks(pid) / ob.CLOCK_TICKS


def _upgraded(client: Client, *, version: str, nodes: int) -> bool:
    """Every GPU node ``upgrade-done`` and schedulable, with a Ready driver pod of ``version`` on each (the
    component label both operators put on driver pods: ours names the DaemonSet per OS, NVIDIA's v25.3.4 not)."""
    labelled = list(client.list(Node, labels={"nvidia.com/gpu.deploy.driver": "true"}))
    if len(labelled) < nodes or any(
        (n.metadata.labels or {}).get(nv.UPGRADE_STATE) != "upgrade-done" or (n.spec and n.spec.unschedulable)
        for n in labelled
        if n.metadata
    ):
        return False
    ready = 0
    for pod in client.list(Pod, namespace=NAMESPACE, labels={"app.kubernetes.io/component": "nvidia-driver"}):
        data = pod.to_dict()
        conditions = (data.get("status") or {}).get("conditions") or []
        new = f"driver:{version}-" in data["spec"]["containers"][0]["image"]
        ready += new and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready >= nodes


def _start_operator(kind: str, kubeconfig: Path) -> Any:
    if kind == "ours":
        return ob._OperatorProcess(kubeconfig=str(kubeconfig))
    return nv.NvidiaOperatorProcess(kubeconfig=kubeconfig, namespace=NAMESPACE)


def measure_one(*, kind: str, binaries: KubeBinaries, nodes: int, log: Callable[[str], None] = print) -> PeerResult:
    result = PeerResult(operator=kind, nodes=nodes)
    requests = node_requests(nodes)
    nodes = sum(r.count for r in requests)  # the mix rounds down
    spawn = multiprocessing.get_context("spawn")
    work = Path(tempfile.mkdtemp(prefix=f"peer-{kind}-"))
    extra = {"kube-apiserver": audit_args(directory=work / "audit", namespace=NAMESPACE)}
    with LocalCluster(binaries=binaries, extra_args=extra) as cluster:
        audit = AuditLog(work / "audit" / "audit.log")
        client = cluster.client(field_manager="bench")
        (install_crds if kind == "ours" else nv.install_nvidia_crds)(client=client)
        client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
        kubeconfig = operator_kubeconfig(client=client, cluster=cluster, namespace=NAMESPACE, path=work / "kubeconfig")
        sim, sim_end = spawn.Pipe()
        sim_process = spawn.Process(
            target=_sim_child, args=(sim_end, str(cluster.kubeconfig_path), requests), daemon=True
        )
        sim_process.start()
        log(f"peer bench ({kind}): {nodes} nodes registered in {float(sim.recv()):.1f} s")
        operator = _start_operator(kind, kubeconfig)
        try:
            time.sleep(5)  # leader election and a first pass with no policy
            pids = {p.name: p.pid for p in cluster.all_processes() if p.pid is not None}
            pids["simulator"] = sim_process.pid or 0
            _rollout(client=client, operator=operator, audit=audit, result=result, pids=pids, log=log)
            _idle(operator=operator, audit=audit, result=result, log=log)
            operator.phase = "spec changes"
            mark, cpu = audit.mark(), _cpu_s(operator.pid)
            result.change_latencies, result.change_timeouts = ob._spec_changes(client)
            result.change_cpu_s = _cpu_s(operator.pid) - cpu
            result.change_requests = sum(audit.count(since=mark).values())
            log(f"peer bench ({kind}): spec changes {[round(x, 2) for x in result.change_latencies]}")
            operator.phase = "driver upgrade"
            _measure_upgrade(client=client, operator=operator, audit=audit, result=result, nodes=nodes, log=log)
            result.rss_peak_mib = ob._memory_mib(operator.pid, "VmHWM")
        finally:
            operator.stop()
            sim.send("stop")
            sim_process.join(timeout=120)
            if sim_process.is_alive():
                sim_process.kill()
            client.close()
    return result


def _process_cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = _cpu_s(pid)
        except OSError:
            continue
    return out


def _rollout(
    *,
    client: Client,
    operator: Any,
    audit: AuditLog,
    result: PeerResult,
    pids: dict[str, int],
    log: Callable[[str], None],
) -> None:
    pids = {**pids, "operator": operator.pid}
    before = _process_cpu(pids)
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": ob.POLICY}}
    start_mark, cpu0 = audit.mark(), _cpu_s(operator.pid)
    client.create(codecs.from_dict({**policy, "spec": nv.NVIDIA_POLICY_SPEC}))
    operator.phase = "policy to ready"
    result.ready_s = ob._wait(lambda: ob._policy_state(client) == "ready", timeout=ob.READY_TIMEOUT, interval=0.2)
    result.cpu_to_ready_s = _cpu_s(operator.pid) - cpu0

    def rolled_out() -> bool:
        return ob._policy_state(client) == "ready" and ob._rolled_out(client)

    rolled = ob._wait(rolled_out, timeout=ob.READY_TIMEOUT, interval=0.5)
    if rolled is not None and result.ready_s is not None:
        result.rolled_out_s = result.ready_s + rolled
    result.cpu_to_rolled_out_s = _cpu_s(operator.pid) - cpu0
    after = _process_cpu(pids)
    result.rollout_cpu_by_process = {name: after[name] - before[name] for name in after if name in before}
    result.rollout_requests = sum(audit.count(since=start_mark).values())
    log(f"peer bench ({result.operator}): ready {result.ready_s} s, rolled out {result.rolled_out_s} s")


def _idle(*, operator: Any, audit: AuditLog, result: PeerResult, log: Callable[[str], None]) -> None:
    operator.phase = "idle"
    time.sleep(ob.SETTLE_SECONDS)
    mark, cpu, begin = audit.mark(), _cpu_s(operator.pid), time.monotonic()
    time.sleep(IDLE_SECONDS)
    result.idle_seconds = time.monotonic() - begin
    result.idle_cpu_percent = (_cpu_s(operator.pid) - cpu) / result.idle_seconds * 100
    result.idle_requests = dict(audit.count(since=mark))
    result.rss_idle_mib = ob._memory_mib(operator.pid, "VmRSS")
    log(f"peer bench ({result.operator}): idle {result.idle_per_minute:.0f}/min {result.idle_requests}")


def _measure_upgrade(
    *, client: Client, operator: Any, audit: AuditLog, result: PeerResult, nodes: int, log: Callable[[str], None]
) -> None:
    old = str(nv.NVIDIA_POLICY_SPEC["driver"]["version"])
    if ob._wait(lambda: _upgraded(client, version=old, nodes=nodes), timeout=UPGRADE_TIMEOUT, interval=1.0) is None:
        result.notes.append(f"nodes never all `upgrade-done` on the first driver version {old}")
        return
    new = nv.UPGRADE_DRIVER_VERSION
    mark, cpu = audit.mark(), _cpu_s(operator.pid)
    client.patch(ClusterPolicyResource, ob.POLICY, {"spec": {"driver": {"version": new}}}, patch_type=PatchType.MERGE)
    result.upgrade_s = ob._wait(
        lambda: _upgraded(client, version=new, nodes=nodes), timeout=UPGRADE_TIMEOUT, interval=1.0
    )
    result.upgrade_cpu_s, result.upgrade_requests = _cpu_s(operator.pid) - cpu, sum(audit.count(since=mark).values())
    log(f"peer bench ({result.operator}): driver upgrade of {nodes} nodes in {result.upgrade_s} s")


def measure(*, binaries: KubeBinaries, nodes: int = 100, log: Callable[[str], None] = print) -> dict[str, PeerResult]:
    return {kind: measure_one(kind=kind, binaries=binaries, nodes=nodes, log=log) for kind in OPERATORS}


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or not ours or not theirs:
        return "n/a"
    return f"{theirs / ours:.2f}x"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def markdown(results: dict[str, PeerResult], *, nodes: int, nvidia_version: str) -> str:
    """The side-by-side table: ours, NVIDIA's, and NVIDIA's / ours (above 1: we use less or are faster)."""
    ours, theirs = results["ours"], results["nvidia"]
    rows: list[tuple[str, float | None, float | None, int]] = [
        ("policy created -> `ready` (s)", ours.ready_s, theirs.ready_s, 1),
        ("policy created -> every DaemonSet rolled out (s)", ours.rolled_out_s, theirs.rolled_out_s, 1),
        ("CPU to `ready` (s)", ours.cpu_to_ready_s, theirs.cpu_to_ready_s, 2),
        ("CPU to rolled out (s)", ours.cpu_to_rolled_out_s, theirs.cpu_to_rolled_out_s, 2),
        ("API requests, policy -> rolled out", ours.rollout_requests, theirs.rollout_requests, 0),
        ("RSS idle (MiB)", ours.rss_idle_mib, theirs.rss_idle_mib, 0),
        ("RSS peak (MiB)", ours.rss_peak_mib, theirs.rss_peak_mib, 0),
        ("idle CPU (% of a core)", ours.idle_cpu_percent, theirs.idle_cpu_percent, 2),
        ("idle API requests per minute", ours.idle_per_minute, theirs.idle_per_minute, 1),
        ("spec change p50 (s)", _p(ours.change_latencies, 0.5), _p(theirs.change_latencies, 0.5), 2),
        ("spec change p99 (s)", _p(ours.change_latencies, 0.99), _p(theirs.change_latencies, 0.99), 2),
        ("CPU for the spec changes (s)", ours.change_cpu_s, theirs.change_cpu_s, 2),
        ("API requests for the spec changes", ours.change_requests, theirs.change_requests, 0),
        (f"driver upgrade of {nodes} nodes (s)", ours.upgrade_s, theirs.upgrade_s, 1),
        ("CPU for the driver upgrade (s)", ours.upgrade_cpu_s, theirs.upgrade_cpu_s, 2),
        ("API requests for the driver upgrade", ours.upgrade_requests, theirs.upgrade_requests, 0),
    ]
    lines = [f"| measure | ours | NVIDIA's {nvidia_version} | NVIDIA's / ours |", "|---|---:|---:|---:|"]
    lines += [f"| {label} | {_fmt(a, d)} | {_fmt(b, d)} | {_ratio(a, b)} |" for label, a, b, d in rows]
    idle = []
    for result in (ours, theirs):
        shown = ", ".join(f"`{k}` {v}" for k, v in sorted(result.idle_requests.items(), key=lambda kv: (-kv[1], kv[0])))
        idle.append(f"- {result.operator}: {shown or 'none'} (in {result.idle_seconds:.0f} s)")
    names = list(dict.fromkeys([*ours.rollout_cpu_by_process, *theirs.rollout_cpu_by_process]))
    cpu = ["| process | ours | NVIDIA's |", "|---|---:|---:|"]
    cpu += [
        f"| {n} | {_fmt(ours.rollout_cpu_by_process.get(n), 2)} | {_fmt(theirs.rollout_cpu_by_process.get(n), 2)} |"
        for n in names
    ]
    idle += [
        "",
        "CPU seconds of every process from the policy's creation to rolled out (the machine's share):",
        "",
        *cpu,
    ]
    notes = [f"- {r.operator}: {note}" for r in (ours, theirs) for note in r.notes]
    return "\n".join([*lines, "", "Idle requests by verb and resource:", "", *idle, *(["", *notes] if notes else [])])


def _p(values: Sequence[float], q: float) -> float | None:
    return ob._pct(values, q) if values else None


def describe(*, nodes: int) -> str:
    mix = ", ".join(f"{profile}:{count * nodes // 100}" for profile, count in GPU_MIX_PER_100.items())
    return (
        f"Both operators, one after the other in this run, each on a fresh local control plane with {nodes} "
        f"simulated GPU nodes ({mix}; all on {OS.os_id} {OS.os_version_id}, NFD labels as upstream expects) in "
        "a simulator process, the operator in its own process with leader election, and the same ClusterPolicy: "
        "the spec NVIDIA's chart values give (NVIDIA's images; ours renders them with NVIDIA's contracts, so both "
        "roll out the same DaemonSets and pods). NVIDIA's operand containers run as cheap stand-ins that honour "
        "the validation files (`bench/nvidia_operator.py`). NVIDIA's operator is "
        f"{nv.NVIDIA_VERSION}, built by `hack/build-nvidia-operator.sh` through the Go module proxy: "
        f"{nv.VERSION_REASON} API requests are counted at the API server from its audit log (the operator's "
        "ServiceAccount only, one event per request as received), so both are counted alike. CPU: the "
        "operator process's user+system time (`/proc/PID/stat`). Idle: "
        f"{IDLE_SECONDS:.0f} s (four of our 60-s resyncs, two of NVIDIA's 2-min requeues) starting "
        f"{ob.SETTLE_SECONDS:.0f} s after rolled out. Spec change: "
        f"{ob.SPEC_CHANGES} new `dcgmExporter.version`s 2 s apart, each timed from the patch to the "
        f"`{ob.EXPORTER_DS}` DaemonSet template carrying the new image. Driver upgrade: `driver.version` "
        "changed with `upgradePolicy.maxParallelUpgrades` 10, timed to every node `upgrade-done` with a Ready "
        "driver pod of the new version. Ratio: NVIDIA's figure over ours (above 1: ours uses less or is faster)."
    )
