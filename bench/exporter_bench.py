"""Exporter footprint and scrape latency on a simulated 8-GPU node with 64 pods.

The exporter runs in a child process of its own (so its RSS and CPU time are its own), started like
``gpu-operator agent exporter``: the child imports the CLI first, so it carries what the real command
loads, then runs the exporter program on a simulated dgx-h100 (same seed and node name as the parent,
so GPU UUIDs agree). The parent serves the node's PodResources API with 64 pods sharing the 8 GPUs
(time-slicing, ids ``<uuid>::<n>``), which the exporter lists on every collection.

Measured: scrape latency p50/p99 over keep-alive connections (as Prometheus scrapes) and with a new
connection per scrape, CPU time per scrape (the child's CPU during a scrape burst, less its idle
collection rate), CPU time per collection (backend reading, PodResources ``List`` and rendering), and
RSS now and at peak. Anchors: dcgm-exporter 405-512 MiB working set, scrapes timing out at 10 s
(goals-and-anchors.md section 4). Targets of issue [5/9]: RSS under 100 MiB, scrape p99 under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from gpu_operator.kubelet.allocation import PodDevices, ResourceDevices
    from gpu_operator.kubelet.podresources import PodResourcesServer

NODE = "bench-node"
SEED = 11
PODS = 64
SCRAPES = 1000
FRESH_SCRAPES = 200
IDLE_SECONDS = 6.0
INTERVAL_MS = 500  # two collections a second: enough of them to measure in a few seconds
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _memory_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fresh_scrape(port: int) -> float:
    """One scrape on a new TCP connection (plain sockets: an HTTP client's own setup is not measured)."""
    began = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        while conn.recv(65536):
            pass
    return time.perf_counter() - began


class _PodResources:
    """The kubelet's PodResources server, in a thread of its own, with PODS pods sharing the GPUs."""

    def __init__(self, socket_path: Path) -> None:
        from gpu_operator.gpu.catalog import node_profile  # noqa: PLC0415
        from gpu_operator.gpu.simulated import SimulatedBackend  # noqa: PLC0415
        from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices  # noqa: PLC0415

        uuids = [
            d.uuid for d in SimulatedBackend(profile=node_profile("dgx-h100"), seed=SEED, node_name=NODE).devices()
        ]
        self.pods = [
            PodDevices(
                namespace=f"team-{i % 4}",
                name=f"job-{i:02d}",
                containers=(
                    ContainerDevices(
                        name="worker",
                        devices=(
                            ResourceDevices(resource_name="nvidia.com/gpu", device_ids=(f"{uuids[i % 8]}::{i // 8}",)),
                        ),
                    ),
                ),
            )
            for i in range(PODS)
        ]
        self.socket = socket_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)

    async def _start(self) -> PodResourcesServer:
        from gpu_operator.kubelet.podresources import PodResourcesServer  # noqa: PLC0415

        server = PodResourcesServer(socket=self.socket, source=self)
        await server.start()
        return server

    def pod_devices(self) -> Sequence[PodDevices]:
        return self.pods

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        return []

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def _run(name: str, *, socket_path: Path, virtual: bool, cli: bool) -> dict[str, float]:
    port = _free_port()
    args = [sys.executable, str(Path(__file__).resolve()), "--serve", "--port", str(port), "--socket", str(socket_path)]
    args += ["--virtual"] * virtual + ["--cli"] * cli
    child = subprocess.Popen(args)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if "DCGM_FI_DEV_GPU_UTIL" in client.get("/metrics").text:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError(f"{name}: the exporter did not come up")
                time.sleep(0.05)
            body = client.get("/metrics", headers={"Accept-Encoding": "identity"}).content
            for _ in range(20):  # warm-up
                client.get("/metrics")
            cpu0, t0 = _cpu_seconds(child.pid), time.monotonic()
            time.sleep(IDLE_SECONDS)
            idle_rate = (_cpu_seconds(child.pid) - cpu0) / (time.monotonic() - t0)
            latencies = []
            cpu1, t1 = _cpu_seconds(child.pid), time.monotonic()
            for _ in range(SCRAPES):
                began = time.perf_counter()
                client.get("/metrics")
                latencies.append(time.perf_counter() - began)
            burst = time.monotonic() - t1
            scrape_cpu = max(0.0, (_cpu_seconds(child.pid) - cpu1) - idle_rate * burst) / SCRAPES
        fresh = [_fresh_scrape(port) for _ in range(FRESH_SCRAPES)]
        rss, peak = _memory_mib(child.pid, "VmRSS"), _memory_mib(child.pid, "VmHWM")
    finally:
        child.terminate()
        child.wait(timeout=30)
    collection_cpu = idle_rate * INTERVAL_MS / 1000  # the idle child does nothing but collect
    return {
        "series": float(sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))),
        "body_kib": len(body) / 1024,
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "scrape_p50_ms": _pct(latencies, 0.5) * 1e3,
        "scrape_p99_ms": _pct(latencies, 0.99) * 1e3,
        "fresh_p99_ms": _pct(fresh, 0.99) * 1e3,
        "cpu_per_scrape_ms": scrape_cpu * 1e3,
        "cpu_per_collection_ms": collection_cpu * 1e3,
        # What a ServiceMonitor's 15 s scrapes and the default 30 s collection interval cost, in cores.
        "cores_at_15s_30s": scrape_cpu / 15 + collection_cpu / 30,
    }


def measure() -> dict[str, dict[str, float]]:
    """Three runs: the default (last pod wins), virtual GPUs (a series per sharing pod), and the
    default without the CLI's imports (the exporter's own footprint)."""
    with tempfile.TemporaryDirectory(prefix="exb-", dir="/tmp") as tmp:
        server = _PodResources(Path(tmp) / "kubelet.sock")
        try:
            return {
                "8 GPUs, 64 pods": _run("default", socket_path=server.socket, virtual=False, cli=True),
                "8 GPUs, 64 pods, virtual GPUs (series per pod)": _run(
                    "virtual", socket_path=server.socket, virtual=True, cli=True
                ),
                "8 GPUs, 64 pods, exporter modules only": _run(
                    "bare", socket_path=server.socket, virtual=False, cli=False
                ),
            }
        finally:
            server.close()


def markdown(results: dict[str, dict[str, float]]) -> str:
    header = [
        "run",
        "series",
        "body KiB",
        "RSS MiB",
        "peak RSS MiB",
        "scrape p50 ms",
        "scrape p99 ms",
        "p99 new conn. ms",
        "CPU/scrape ms",
        "CPU/collection ms",
        "cores (15 s scrape, 30 s interval)",
    ]
    keys = [
        "series",
        "body_kib",
        "rss_mib",
        "peak_rss_mib",
        "scrape_p50_ms",
        "scrape_p99_ms",
        "fresh_p99_ms",
        "cpu_per_scrape_ms",
        "cpu_per_collection_ms",
        "cores_at_15s_30s",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(keys) + "|"]
    for run, figures in results.items():
        cells = [
            f"{figures[k]:.0f}"
            if k == "series"
            else f"{figures[k]:.4f}"
            if k.startswith("cores")
            else f"{figures[k]:.2f}"
            for k in keys
        ]
        lines.append("| " + run + " | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"{SCRAPES} sequential scrapes on one keep-alive connection ({FRESH_SCRAPES} with a new connection each), "
        f"collection every {INTERVAL_MS} ms with a PodResources `List` of {PODS} pods. Anchors: dcgm-exporter "
        "405-512 MiB working set on 8-GPU nodes and 10 s scrape timeouts; targets: RSS < 100 MiB, scrape p99 < 100 ms."
    )
    return "\n".join(lines)


def _serve(argv: Sequence[str]) -> None:
    """The child: the exporter program on a simulated dgx-h100 until SIGTERM."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--virtual", action="store_true")
    parser.add_argument("--cli", action="store_true")
    args = parser.parse_args(argv)
    if args.cli:
        import gpu_operator.cli.main  # noqa: F401, PLC0415 - carry what `gpu-operator agent` loads
    from gpu_operator.agents.exporter import program  # noqa: PLC0415
    from gpu_operator.agents.host import HostContext  # noqa: PLC0415
    from gpu_operator.gpu.catalog import node_profile  # noqa: PLC0415
    from gpu_operator.gpu.simulated import SimulatedBackend  # noqa: PLC0415

    backend = SimulatedBackend(profile=node_profile("dgx-h100"), seed=SEED, node_name=NODE)
    for index in range(8):
        backend.set_load(index, 10 * index)
    env = {
        "NODE_NAME": NODE,
        "DCGM_EXPORTER_LISTEN": f"127.0.0.1:{args.port}",
        "DCGM_EXPORTER_INTERVAL": str(INTERVAL_MS),
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_POD_RESOURCES_KUBELET_SOCKET": args.socket,
        "KUBERNETES_VIRTUAL_GPUS": "true" if args.virtual else "false",
        "READY_FILE": "/dev/null",
    }

    async def run() -> None:
        ctx = HostContext(gpu=backend, env=env)
        ctx.install_signal_handlers()
        await program.main(ctx)

    asyncio.run(run())


if __name__ == "__main__":
    if "--serve" in sys.argv:
        _serve(sys.argv[1:])
    else:
        print(markdown(measure()))
