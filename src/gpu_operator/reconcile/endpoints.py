"""The operator's health probes and Prometheus metrics, on a tiny asyncio HTTP server.

``/healthz`` answers 200 while every task of the operator runs and 503 once one has died (the
runtime's supervisor decides); ``/readyz`` once a first pass finished (or while waiting for
leadership); ``/metrics`` exports the upstream-named ``gpu_operator_*`` gauges and counters
(reconcile totals by outcome, last success time, status, GPU node count, API requests) and each work
loop's passes, failures by kind and liveness.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpu_operator.kube.api import Kube
from gpu_operator.kube.informer import Informer
from gpu_operator.reconcile.clusterpolicy import Outcome
from gpu_operator.upgrade.controller import UpgradeOutcome
from gpu_operator.upgrade.model import DONE, FAILED, REQUIRED, UNKNOWN


@dataclass
class OperatorMetrics:
    """Counters the operator updates after every pass."""

    reconciliation_total: int = 0
    reconciliation_failed_total: int = 0
    last_success: float = 0.0
    status: int = -1  # 1 ready, 0 not ready, -1 no ClusterPolicy, -2 operator error
    gpu_nodes: int = 0
    api_requests: int = 0
    passes_by_state: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    upgrades: UpgradeOutcome | None = None
    caches: tuple[Informer, ...] = ()
    cached_reads: int = 0
    #: The work loops' own lines (``Operator.metric_lines``), read at every scrape.
    loops: Callable[[], list[str]] | None = None

    def observe(
        self, outcome: Outcome, *, api_requests: int, upgrades: UpgradeOutcome | None = None, kube: Kube | None = None
    ) -> None:
        self.reconciliation_total += 1
        self.upgrades = upgrades
        if kube is not None:
            self.caches, self.cached_reads = kube.informers, kube.cached_reads
        self.api_requests = api_requests
        state = outcome.status.state if outcome.status else "none"
        self.passes_by_state[state] = self.passes_by_state.get(state, 0) + 1
        if outcome.status is None:
            self.status = -1
        elif outcome.status.backoff:
            self.status, self.reconciliation_failed_total = -2, self.reconciliation_failed_total + 1
        else:
            self.status = 1 if outcome.status.state == "ready" else 0
            self.last_success = time.time()

    def render(self) -> str:
        lines = [
            "# HELP gpu_operator_reconciliation_total Reconcile passes.",
            "# TYPE gpu_operator_reconciliation_total counter",
            f"gpu_operator_reconciliation_total {self.reconciliation_total}",
            "# HELP gpu_operator_reconciliation_failed_total Failed reconcile passes.",
            "# TYPE gpu_operator_reconciliation_failed_total counter",
            f"gpu_operator_reconciliation_failed_total {self.reconciliation_failed_total}",
            "# HELP gpu_operator_reconciliation_last_success_ts_seconds Time of the last successful pass.",
            "# TYPE gpu_operator_reconciliation_last_success_ts_seconds gauge",
            f"gpu_operator_reconciliation_last_success_ts_seconds {self.last_success:.3f}",
            "# HELP gpu_operator_reconciliation_status 1 ready, 0 not ready, -1 no ClusterPolicy, -2 error.",
            "# TYPE gpu_operator_reconciliation_status gauge",
            f"gpu_operator_reconciliation_status {self.status}",
            "# HELP gpu_operator_api_requests_total API requests made by the operator.",
            "# TYPE gpu_operator_api_requests_total counter",
            f"gpu_operator_api_requests_total {self.api_requests}",
            "# HELP gpu_operator_reconciliation_outcomes_total Reconcile passes by resulting policy state.",
            "# TYPE gpu_operator_reconciliation_outcomes_total counter",
        ]
        lines += [
            f'gpu_operator_reconciliation_outcomes_total{{state="{k}"}} {v}'
            for k, v in sorted(self.passes_by_state.items())
        ]
        return (
            "\n".join(
                lines
                + cache_lines(self.caches, cached_reads=self.cached_reads)
                + upgrade_lines(self.upgrades)
                + (self.loops() if self.loops is not None else [])
            )
            + "\n"
        )


def cache_lines(caches: tuple[Informer, ...], *, cached_reads: int) -> list[str]:
    """The informers: objects held, lists made (1 + one per recovered watch), reads they answered."""
    if not caches:
        return []
    lines = [
        "# HELP gpu_operator_cache_reads_total Reads answered from the operator's caches instead of the API server.",
        "# TYPE gpu_operator_cache_reads_total counter",
        f"gpu_operator_cache_reads_total {cached_reads}",
        "# HELP gpu_operator_cache_objects Objects held per cache.",
        "# TYPE gpu_operator_cache_objects gauge",
    ]
    labels = [f'kind="{c.kind}",selector="{",".join(f"{k}={v}" for k, v in c.labels.items())}"' for c in caches]
    lines += [f"gpu_operator_cache_objects{{{label}}} {len(c.items)}" for label, c in zip(labels, caches, strict=True)]
    lines += [
        "# HELP gpu_operator_cache_lists_total Full lists per cache: the first, then one per broken watch.",
        "# TYPE gpu_operator_cache_lists_total counter",
    ]
    lines += [f"gpu_operator_cache_lists_total{{{label}}} {c.lists}" for label, c in zip(labels, caches, strict=True)]
    return lines


def upgrade_lines(upgrades: UpgradeOutcome | None, *, prefix: str = "gpu_operator") -> list[str]:
    """Upstream's driver-upgrade gauges, summed over the ClusterPolicy and NVIDIADriver partitions
    (the network operator's OFED partitions under its own ``prefix``)."""
    parts = upgrades.partitions if upgrades is not None else ()
    counts: dict[str, int] = {}
    for part in parts:
        for state, n in part.counts.items():
            counts[state] = counts.get(state, 0) + n
    idle = (UNKNOWN, DONE, REQUIRED, FAILED)
    values = {
        "driver_auto_upgrade_enabled": ("1 when any driver partition upgrades automatically.",
                                        int(any(p.knobs.auto_upgrade for p in parts))),
        "nodes_upgrades_in_progress": ("Nodes between cordon and uncordon.",
                                       sum(n for s, n in counts.items() if s not in idle)),
        "nodes_upgrades_done": ("Nodes upgrade-done.", counts.get(DONE, 0)),
        "nodes_upgrades_failed": ("Nodes upgrade-failed.", counts.get(FAILED, 0)),
        "nodes_upgrades_pending": ("Nodes upgrade-required, waiting for a slot.", counts.get(REQUIRED, 0)),
        "nodes_upgrades_available": ("Upgrade slots free in the last pass.",
                                     sum(p.plan.slots for p in parts if p.plan is not None)),
    }  # fmt: skip
    lines = []
    for name, (text, value) in values.items():
        lines += [
            f"# HELP {prefix}_{name} {text}",
            f"# TYPE {prefix}_{name} gauge",
            f"{prefix}_{name} {value}",
        ]
    return lines


def _parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


class Renders(Protocol):
    """What ``/metrics`` serves: the GPU operator's metrics or the network operator's."""

    def render(self) -> str: ...


async def serve(*, address: str, metrics: Renders, healthy: Callable[[], bool], ready: asyncio.Event) -> asyncio.Server:
    """Start answering GET /healthz, /readyz and /metrics on ``address`` (``host:port``)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            path = request.split(b" ")[1].decode() if request.count(b" ") >= 2 else "/"
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b"\n", b""):
                pass
            if path == "/metrics":
                code, body, kind = 200, metrics.render(), "text/plain; version=0.0.4"
            elif path in ("/healthz", "/readyz"):
                ok = healthy() if path == "/healthz" else ready.is_set()
                code, body, kind = (200, "ok\n", "text/plain") if ok else (503, "not ready\n", "text/plain")
            else:
                code, body, kind = 404, "not found\n", "text/plain"
            data = body.encode()
            head = f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\nContent-Type: {kind}\r\n"
            writer.write((head + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data)
            await writer.drain()
        except (TimeoutError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    host, port = _parse_address(address)
    return await asyncio.start_server(handle, host, port)
