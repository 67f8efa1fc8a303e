"""Where a test run's time goes: wall time per tier, the slowest modules and the longest waits, printed at
the end of every run.

Each test's wall time runs from the start of its setup to the end of its teardown, so a module-scoped
fixture (a cluster started, a chart installed) counts toward the module that paid for it, and a module's
time is the sum over its tests. Tiers are the directories under ``tests/`` (``tests.conftest.tier_of``).
The longest waits are the calls of ``gpu_operator.localcluster.waiting.wait_for`` (every test waits
through it) with their ``describe`` text: in a module of a few long flows they say which step the time
went to. The table goes to the terminal and, as JSON, to ``build/test-times.json``, so each change can
show what it cost (a CI log keeps the table; the file is for comparing two runs).

Pure core: :func:`summarise` and :func:`table` take the measured times and do no I/O.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class TimingPlugin:
    """Measures each test from setup to teardown and reports per module when the run ends."""

    def __init__(self, *, root: Path, tier_of: TierOf, order: Sequence[str], output: Path) -> None:
        self.root, self.tier_of, self.order, self.output = root, tier_of, order, output
        self.modules: dict[str, tuple[int, float]] = {}
        self.waits: list[tuple[float, str, str]] = []  # (seconds, test id, what it waited for)
        self.current = ""

    def time_waits(self) -> None:
        """Wrap ``waiting.wait_for`` before any test module imports it by name (collection comes later)."""
        original = waiting.wait_for

        @functools.wraps(original)
        def timed(check: Callable[[], Any], **kwargs: Any) -> Any:
            began = time.monotonic()
            try:
                return original(check, **kwargs)
            finally:
                self.waits.append((time.monotonic() - began, self.current, str(kwargs.get("describe", "?"))))

        waiting.wait_for = timed

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        began = time.monotonic()
        self.current = item.nodeid
        yield
        try:
            module = item.path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            module = str(item.path)
        count, seconds = self.modules.get(module, (0, 0.0))
        self.modules[module] = (count + 1, seconds + time.monotonic() - began)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.modules:
            return
        summary = summarise(self.modules, tier_of=self.tier_of, order=self.order)
        terminalreporter.section("where the time went")
        for line in table(summary):
            terminalreporter.write_line(line)
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
        record = {"tiers": tiers, "modules": modules, "longest_waits": waits}
        self.output.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
