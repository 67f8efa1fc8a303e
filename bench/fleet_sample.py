"""Per-process CPU and memory of a benchmark run, phase by phase, and the machine's own load.

:class:`ProcessSampler` reads ``/proc/PID/stat`` and ``/proc/PID/status`` of named processes (the control
plane, each simulator, the operator, the benchmark itself) once a second from a thread, and ``/proc/stat`` and
``/proc/meminfo`` for the whole machine. For each phase (set ``sampler.phase``) it sums every process's CPU
seconds and keeps its highest RSS, so a report can show which process used the cores while the operator
waited: when the machine is busy near 100 % of its cores, the limit is the machine, not the operator.
A process replaced under the same name (a restarted operator) is followed by ``add``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
MACHINE = "machine"  # the name of the whole machine's row


@dataclass
class PhaseUsage:
    """One phase: its length, each process's CPU seconds and peak RSS (MiB); the machine's busy CPU seconds
    (all cores) and the lowest ``MemAvailable`` (MiB)."""

    seconds: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    machine_busy_s: float = 0.0
    min_available_mib: float = float("inf")

    def cpu_percent(self, name: str) -> float:
        """100 % = one core busy through the whole phase."""
        seconds = self.machine_busy_s if name == MACHINE else self.cpu_s.get(name, 0.0)
        return seconds / self.seconds * 100 if self.seconds else 0.0


def _process_sample(pid: int) -> tuple[int, float] | None:
    """(CPU ticks, RSS MiB) of ``pid``; None once it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    rss = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0.0)
    return int(fields[11]) + int(fields[12]), rss


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of all cores since boot; iowait counts as idle."""
    values = [int(v) for v in Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _available_mib() -> float:
    for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ProcessSampler:
    """Samples named processes every ``interval`` seconds into the current phase until :meth:`stop`."""

    def __init__(self, *, pids: dict[str, int], interval: float = 1.0) -> None:
        self.pids = dict(pids)
        self.interval = interval
        self.phase = "start"
        self.usage: dict[str, PhaseUsage] = {}
        self._last: dict[str, tuple[int, int]] = {}  # name -> (pid, ticks) of the previous sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-sampler", daemon=True)
        self._thread.start()

    def add(self, pids: dict[str, int]) -> None:
        """Follow more processes, or a new process under a name already followed."""
        with self._lock:
            self.pids.update(pids)

    def _run(self) -> None:
        machine, moment = _machine_ticks(), time.monotonic()
        self._sample(0.0, 0)
        while not self._stop.wait(self.interval):
            now, ticks = time.monotonic(), _machine_ticks()
            self._sample(now - moment, ticks[0] - machine[0])
            machine, moment = ticks, now

    def _sample(self, elapsed: float, machine_busy: int) -> None:
        with self._lock:
            pids, phase = dict(self.pids), self.phase
        usage = self.usage.setdefault(phase, PhaseUsage())
        usage.seconds += elapsed
        usage.machine_busy_s += machine_busy / CLOCK_TICKS
        usage.min_available_mib = min(usage.min_available_mib, _available_mib())
        for name, pid in pids.items():
            sample = _process_sample(pid)
            if sample is None:
                continue
            ticks, rss = sample
            last = self._last.get(name)
            if last is not None and last[0] == pid:  # a new process under the name starts from its first sample
                usage.cpu_s[name] = usage.cpu_s.get(name, 0.0) + (ticks - last[1]) / CLOCK_TICKS
            self._last[name] = (pid, ticks)
            usage.peak_rss_mib[name] = max(usage.peak_rss_mib.get(name, 0.0), rss)

    def stop(self) -> dict[str, PhaseUsage]:
        """Stop sampling; the usage of every phase, in the order they began."""
        self._stop.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(timeout=10)
        return dict(self.usage)
