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
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    report = render_report(sections=sections, ctx=ctx, seconds=time.monotonic() - begin)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
