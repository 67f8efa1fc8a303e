"""Would kopf do for the operator's watches? A minimal kopf operator against 1,000 simulated nodes.

The issue allows kopf for watches, "if kopf blocks a goal, show the measurement". This probe runs, one
after the other on the same fresh local control plane with 1,000 simulated nodes (no ClusterPolicy, so
no operand pods), each in a process of its own:

* ``kopf``: a minimal kopf operator with one ``@kopf.on.event`` handler on Nodes, as a node-labelling
  operator needs (standalone, cluster-wide, no peering); requests counted on aiohttp's session;
* ``operator``: our operator as committed (``bench/operator_bench.py``'s process, requests counted on
  its HTTP client);
* ``operator + Node filter``: ours with the change proposed for ``reconcile/operator.py``.

For each: RSS and peak RSS, CPU and API requests over 60 s of idling (20 s after start), and the Node
events its handler or watch received. Run::

    GPU_OPERATOR_KUBE_BIN_DIR=... .venv/bin/python bench/kopf_probe.py

and it prints a Markdown table (docs/architecture.md, "Why not kopf: the measurement", quotes it).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import operator_bench
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.binaries import ALL_BINARIES, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster

NODES = 1000
SETTLE_SECONDS = 20.0
IDLE_SECONDS = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _kopf_child(conn: Any, kubeconfig: str) -> None:
    """kopf with one Node event handler; counts its requests (aiohttp) and the events handled."""
    import aiohttp  # noqa: PLC0415 - kopf's HTTP client, in the child only
    import kopf  # noqa: PLC0415

    logging.basicConfig(level=logging.WARNING)
    os.environ["KUBECONFIG"] = kubeconfig
    counts: Counter[str] = Counter()
    handled = [0]
    original = aiohttp.ClientSession._request

    async def counted(self: Any, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        text = str(url)
        path, _, query = text.partition("?")
        host_less = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else path
        counts[operator_bench._category(method, host_less, query)] += 1
        return await original(self, method, url, *args, **kwargs)

    aiohttp.ClientSession._request = counted  # type: ignore[method-assign]

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # no k8s Events from kopf itself: our operator posts few too

    @kopf.on.event("", "v1", "nodes")
    def node_event(**_: Any) -> None:  # a labelling operator would look at the labels here
        handled[0] += 1

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def snapshot() -> dict[str, Any]:
            return {"requests": dict(counts), "events": handled[0]}

        def serve() -> None:
            while True:
                if conn.recv() == "stats":
                    conn.send(asyncio.run_coroutine_threadsafe(snapshot(), loop).result(30))
                else:
                    loop.call_soon_threadsafe(stop.set)
                    return

        threading.Thread(target=serve, daemon=True).start()
        conn.send("started")
        await kopf.operator(clusterwide=True, standalone=True, stop_flag=stop)

    asyncio.run(main())


@dataclass(frozen=True, kw_only=True)
class Probe:
    name: str
    rss_mib: float
    peak_mib: float
    cpu_percent: float
    requests_per_minute: float
    requests: dict[str, int]
    note: str


def _cpu(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _kopf(kubeconfig: str) -> Probe:
    spawn = multiprocessing.get_context("spawn")
    conn, child_end = spawn.Pipe()
    process = spawn.Process(target=_kopf_child, args=(child_end, kubeconfig), daemon=True)
    process.start()
    assert conn.recv() == "started"
    assert process.pid is not None

    def stats() -> dict[str, Any]:
        conn.send("stats")
        reply: dict[str, Any] = conn.recv()
        return reply

    time.sleep(SETTLE_SECONDS)
    before, ticks, begin = stats(), _cpu(process.pid), time.monotonic()
    time.sleep(IDLE_SECONDS)
    after, elapsed = stats(), time.monotonic() - begin
    cpu = (_cpu(process.pid) - ticks) / CLOCK_TICKS / elapsed * 100
    rss, peak = (operator_bench._memory_mib(process.pid, key) for key in ("VmRSS", "VmHWM"))
    conn.send("stop")
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
    requests = {k: v - before["requests"].get(k, 0) for k, v in after["requests"].items()}
    requests = {k: v for k, v in requests.items() if v}
    events = (after["events"] - before["events"]) / elapsed * 60
    return Probe(
        name="kopf 1.x, one `@kopf.on.event` Node handler", rss_mib=rss, peak_mib=peak, cpu_percent=cpu,
        requests_per_minute=sum(requests.values()) / elapsed * 60, requests=requests,
        note=f"{events:.0f} Node events/min handled (one handler call each)",
    )  # fmt: skip


def _ours(kubeconfig: str, *, filter_nodes: bool) -> Probe:
    operator_bench.SETTLE_SECONDS = SETTLE_SECONDS
    operator_bench.IDLE_SECONDS = IDLE_SECONDS
    process = operator_bench._OperatorProcess(kubeconfig=kubeconfig, filter_nodes=filter_nodes)
    idle = process.idle()
    peak = operator_bench._memory_mib(process.pid, "VmHWM")
    process.stop()
    name = "our operator + proposed Node filter" if filter_nodes else "our operator (as committed)"
    return Probe(
        name=name, rss_mib=idle.rss_mib, peak_mib=peak, cpu_percent=idle.cpu_percent,
        requests_per_minute=idle.per_minute, requests=idle.requests,
        note=f"{idle.passes} reconcile passes/min (no ClusterPolicy: list and facts only)",
    )  # fmt: skip


def measure() -> list[Probe]:
    spawn = multiprocessing.get_context("spawn")
    with LocalCluster(binaries=locate_binaries(required=ALL_BINARIES)) as cluster:
        client = cluster.client(field_manager="bench")
        install_crds(client=client)
        client.create(Namespace(metadata=ObjectMeta(name=operator_bench.NAMESPACE)))  # where our Lease lives
        kubeconfig = str(cluster.kubeconfig_path)
        sim, sim_end = spawn.Pipe()
        spec = operator_bench.node_spec(NODES)
        sim_process = spawn.Process(target=operator_bench._sim_child, args=(sim_end, kubeconfig, spec), daemon=True)
        sim_process.start()
        print(f"kopf probe: {NODES} nodes registered in {sim.recv():.1f} s", file=sys.stderr, flush=True)
        probes = [_kopf(kubeconfig), _ours(kubeconfig, filter_nodes=False), _ours(kubeconfig, filter_nodes=True)]
        sim.send("stop")
        sim_process.join(timeout=120)
        client.close()
    return probes


def markdown(probes: list[Probe]) -> str:
    header = "| process | RSS / peak MiB | CPU % (1 core = 100) | API requests/min | |\n|---|---:|---:|---:|---|"
    rows = [
        f"| {p.name} | {p.rss_mib:.0f} / {p.peak_mib:.0f} | {p.cpu_percent:.1f} | {p.requests_per_minute:.0f} "
        f"| {p.note} |"
        for p in probes
    ]
    detail = [f"- {p.name}: " + ", ".join(f"`{k}` {v}" for k, v in sorted(p.requests.items())) for p in probes]
    return "\n".join([header, *rows, "", *detail])


if __name__ == "__main__":
    print(markdown(measure()))
