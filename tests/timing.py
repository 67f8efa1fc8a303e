"""Where a test run's time goes: wall time per tier, the slowest modules and the longest waits, printed at
the end of every run.

Each test's wall time runs from the start of its setup to the end of its teardown, so a module-scoped
fixture (a cluster started, a chart installed) counts toward the module that paid for it, and a module's
time is the sum over its tests. Tiers are the directories under ``tests/`` (``tests.conftest.tier_of``).
The longest waits are the calls of ``gpu_operator.localcluster.waiting.wait_for`` (every test waits
through it) with their ``describe`` text: in a module of a few long flows they say which step the time
went to. The table goes to the terminal and, as JSON, to ``build/test-times.json``, so each change can
show what it cost (a CI log keeps the table; the file is for comparing two runs).

Times come from the test reports (each phase's duration, and the waits a test made as its report's user
properties), so the same table comes out of a run spread over pytest-xdist workers: there a tier's
seconds are the sum over workers, more than the wall time it took, which the table then says. ``make
test`` runs the fast tiers on every core and the others after them, in a second pytest run that sets
``GPU_OPERATOR_TEST_TIMES_CONTINUE=1``: that run adds its times to the first's record, and its table is
the whole run's.

Pure core: :func:`summarise` and :func:`table` take the measured times and do no I/O.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from gpu_operator.localcluster import waiting

SLOWEST = 15
LONGEST_WAITS = 10
TierOf = Callable[[str], str | None]  # a module's path under the repository -> its tier


@dataclass(frozen=True)
class Summary:
    """Seconds and test counts per tier (in run order), and the slowest modules, slowest first."""

    tiers: tuple[tuple[str, int, float], ...]  # (tier, tests, seconds)
    slowest: tuple[tuple[str, int, float], ...]  # (module, tests, seconds)
    total: float


def summarise(
    modules: Mapping[str, tuple[int, float]], *, tier_of: TierOf, order: Sequence[str], slowest: int = SLOWEST
) -> Summary:
    """``modules`` maps a module's path under the repository (``tests/e2e/test_x.py``) to (tests, seconds);
    tiers are listed in ``order``, then "other" (modules ``tier_of`` places in none)."""
    per_tier: dict[str, list[float]] = {}
    for module, (count, seconds) in modules.items():
        tier = tier_of(module) or "other"
        counted = per_tier.setdefault(tier, [0, 0.0])
        counted[0] += count
        counted[1] += seconds
    ranks = [*order, "other"]
    tiers = tuple((t, int(c), s) for t, (c, s) in sorted(per_tier.items(), key=lambda kv: ranks.index(kv[0])))
    ranked = sorted(modules.items(), key=lambda kv: (-kv[1][1], kv[0]))[:slowest]
    return Summary(tiers=tiers, slowest=tuple((m, c, s) for m, (c, s) in ranked),
                   total=sum(s for _, _, s in tiers))  # fmt: skip


def table(summary: Summary) -> list[str]:
    """The summary as the lines printed at the end of a run."""
    lines = [f"{'tier':<12} {'tests':>6} {'seconds':>9} {'share':>6}"]
    for tier, count, seconds in summary.tiers:
        share = seconds / summary.total if summary.total else 0.0
        lines.append(f"{tier:<12} {count:>6} {seconds:>9.1f} {share:>6.0%}")
    lines.append(f"{'all':<12} {sum(c for _, c, _ in summary.tiers):>6} {summary.total:>9.1f}")
    lines.append("")
    lines.append(f"the {len(summary.slowest)} slowest modules:")
    lines += [f"{seconds:>9.1f} s {count:>5} tests  {module}" for module, count, seconds in summary.slowest]
    return lines


#: The user property a test's report carries for each wait it made: (seconds, what it waited for).
WAIT_PROPERTY = "gpu_operator_wait"
#: Set (to 1) in a run that continues the record an earlier run of the same ``make test`` wrote.
CONTINUE_ENV = "GPU_OPERATOR_TEST_TIMES_CONTINUE"


class TimingPlugin:
    """Adds up each test's phases per module from the reports and reports per module when the run ends."""

    def __init__(
        self, *, root: Path, tier_of: TierOf, order: Sequence[str], output: Path, resume: bool = False
    ) -> None:
        self.root, self.tier_of, self.order, self.output = root, tier_of, order, output
        self.modules: dict[str, tuple[int, float]] = {}
        self.waits: list[tuple[float, str, str]] = []  # (seconds, test id, what it waited for)
        self.current: pytest.Item | None = None
        self.runs: list[dict[str, Any]] = []  # each pytest run of the record: its tiers, workers and wall time
        self.began = time.monotonic()
        self.ran: set[str] = set()  # the tiers this run's tests were of
        self.workers = 0  # pytest-xdist workers of this run (0: none)
        if resume:
            self._resume()

    def _resume(self) -> None:
        try:
            record = json.loads(self.output.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        for module, row in (record.get("modules") or {}).items():
            self.modules[module] = (int(row["tests"]), float(row["seconds"]))
        self.waits += [
            (float(w["seconds"]), str(w["test"]), str(w["describe"])) for w in record.get("longest_waits") or []
        ]
        self.runs += list(record.get("runs") or [])

    def time_waits(self) -> None:
        """Wrap ``waiting.wait_for`` before any test module imports it by name (collection comes later)."""
        original = waiting.wait_for

        @functools.wraps(original)
        def timed(check: Callable[[], Any], **kwargs: Any) -> Any:
            began = time.monotonic()
            try:
                return original(check, **kwargs)
            finally:
                if self.current is not None:
                    seconds = time.monotonic() - began
                    self.current.user_properties.append((WAIT_PROPERTY, (seconds, str(kwargs.get("describe", "?")))))

        waiting.wait_for = timed

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        # Where the test runs (this process or an xdist worker): its waits go on its reports from here.
        self.current = item
        yield
        self.current = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.location[0] if report.location else report.nodeid.split("::")[0]
        count, seconds = self.modules.get(module, (0, 0.0))
        done = report.when == "teardown"
        self.modules[module] = (count + int(done), seconds + report.duration)
        if done:
            self.ran.add(self.tier_of(module) or "other")
            for name, value in report.user_properties:
                if name == WAIT_PROPERTY:
                    waited, what = cast("tuple[float, str]", value)  # a list once it crossed from a worker
                    self.waits.append((float(waited), report.nodeid, str(what)))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.began = time.monotonic()
        self.ran = set()
        self.workers = int(getattr(session.config.option, "numprocesses", 0) or 0)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.modules:
            return
        ranks = [*self.order, "other"]
        tiers_run = sorted(self.ran, key=lambda t: ranks.index(t) if t in ranks else len(ranks))
        self.runs.append({"tiers": tiers_run, "workers": self.workers,
                          "wall_seconds": round(time.monotonic() - self.began, 1)})  # fmt: skip
        summary = summarise(self.modules, tier_of=self.tier_of, order=self.order)
        terminalreporter.section("where the time went")
        for line in table(summary):
            terminalreporter.write_line(line)
        terminalreporter.write_line("")
        for run in self.runs:
            on = f"on {run['workers']} workers (tier seconds summed over them)" if run["workers"] else "in one process"
            terminalreporter.write_line(f"{', '.join(run['tiers'])}: {run['wall_seconds']:.1f} s wall, {on}")
        longest = sorted(self.waits, reverse=True)[:LONGEST_WAITS]
        if longest:
            terminalreporter.write_line("")
            terminalreporter.write_line(f"the {len(longest)} longest waits:")
            for seconds, test, what in longest:
                terminalreporter.write_line(f"{seconds:>9.1f} s  {what}  ({test})")
        tiers = [{"tier": t, "tests": c, "seconds": round(s, 1)} for t, c, s in summary.tiers]
        modules = {m: {"tests": c, "seconds": round(s, 1)} for m, (c, s) in sorted(self.modules.items())}
        self.output.parent.mkdir(parents=True, exist_ok=True)
        waits = [{"seconds": round(s, 1), "test": t, "describe": w} for s, t, w in longest]
        record = {"tiers": tiers, "modules": modules, "longest_waits": waits, "runs": self.runs}
        self.output.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
