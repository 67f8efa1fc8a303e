"""The end-of-run timing table (tests/timing.py): tiers in run order, modules slowest first."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import REPO, RUN_ORDER, tier_of
from tests.timing import WAIT_PROPERTY, Summary, TimingPlugin, summarise, table


def _summarise(modules: dict[str, tuple[int, float]], **kwargs: int) -> Summary:
    return summarise(modules, tier_of=lambda module: tier_of(REPO / module), order=RUN_ORDER, **kwargs)


def test_tiers_in_run_order_and_the_slowest_modules_first() -> None:
    summary = _summarise(
        {
            "tests/integration/test_a.py": (3, 40.0),
            "tests/unit/test_b.py": (100, 5.0),
            "tests/unit/test_c.py": (50, 15.0),
            "tests/e2e/test_d.py": (2, 140.0),
            "bench/test_e.py": (1, 0.5),
        },
        slowest=3,
    )
    assert summary.tiers == (("unit", 150, 20.0), ("e2e", 2, 140.0), ("integration", 3, 40.0), ("other", 1, 0.5))
    assert summary.slowest == (
        ("tests/e2e/test_d.py", 2, 140.0),
        ("tests/integration/test_a.py", 3, 40.0),
        ("tests/unit/test_c.py", 50, 15.0),
    )
    assert summary.total == 200.5
    lines = table(summary)
    assert lines[1].split() == ["unit", "150", "20.0", "10%"]
    assert lines[5].split() == ["all", "156", "200.5"]
    assert lines[-3].split() == ["140.0", "s", "2", "tests", "tests/e2e/test_d.py"]


def test_an_empty_run_has_no_shares_to_divide() -> None:
    summary = _summarise({})
    assert (summary.tiers, summary.slowest, summary.total) == ((), (), 0.0)
    assert table(summary)[1].split() == ["all", "0", "0.0"]


class _Report:
    """What the plugin reads of a test report (as pytest-xdist hands a worker's report to the controller)."""

    def __init__(self, nodeid: str, when: str, duration: float, waits: list[tuple[float, str]] | None = None) -> None:
        self.nodeid, self.when, self.duration = nodeid, when, duration
        self.location = (nodeid.split("::", maxsplit=1)[0], 1, nodeid)
        self.user_properties = [(WAIT_PROPERTY, list(w)) for w in waits or []]  # lists: as from a worker


class _Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _run(plugin: TimingPlugin, workers: int, reports: list[_Report]) -> list[str]:
    session = SimpleNamespace(config=SimpleNamespace(option=SimpleNamespace(numprocesses=workers)))
    plugin.pytest_sessionstart(session)  # type: ignore[arg-type]
    for report in reports:
        plugin.pytest_runtest_logreport(report)  # type: ignore[arg-type]
    terminal = _Terminal()
    plugin.pytest_terminal_summary(terminal)  # type: ignore[arg-type]
    return terminal.lines


def test_reports_from_workers_and_a_second_run_make_one_record(tmp_path: Path) -> None:
    """``make test``: the fast tiers on xdist workers, then the rest in a run that continues the record."""
    output = tmp_path / "test-times.json"

    def plugin(*, resume: bool) -> TimingPlugin:
        return TimingPlugin(root=REPO, tier_of=lambda module: tier_of(REPO / module), order=RUN_ORDER, output=output,
                            resume=resume)  # fmt: skip

    fast = [_Report("tests/unit/test_a.py::t1", w, 0.5) for w in ("setup", "call", "teardown")]
    fast += [_Report("tests/unit/test_a.py::t2", w, 1.0) for w in ("setup", "call", "teardown")]
    _run(plugin(resume=False), 2, fast)
    both = [(25.0, "a cluster"), (40.0, "an upgrade")]
    slow = [_Report("tests/e2e/test_b.py::t", "setup", 30.0, [(25.0, "a cluster")]),
            _Report("tests/e2e/test_b.py::t", "call", 50.0, both),
            _Report("tests/e2e/test_b.py::t", "teardown", 2.0, both)]  # fmt: skip
    lines = _run(plugin(resume=True), 0, slow)
    record = json.loads(output.read_text(encoding="utf-8"))
    assert record["tiers"] == [
        {"tier": "unit", "tests": 2, "seconds": 4.5},
        {"tier": "e2e", "tests": 1, "seconds": 82.0},
    ]
    # Each wait once (a test's later reports repeat its earlier properties), longest first.
    assert [(w["seconds"], w["describe"]) for w in record["longest_waits"]] == [
        (40.0, "an upgrade"),
        (25.0, "a cluster"),
    ]
    assert [(r["tiers"], r["workers"]) for r in record["runs"]] == [(["unit"], 2), (["e2e"], 0)]
    assert any(
        line.startswith("unit: ") and line.endswith("on 2 workers (tier seconds summed over them)") for line in lines
    )
    assert any(line.startswith("e2e: ") and line.endswith("in one process") for line in lines)
    # Without resume, a run starts a record of its own.
    _run(plugin(resume=False), 0, slow)
    assert [t["tier"] for t in json.loads(output.read_text(encoding="utf-8"))["tiers"]] == ["e2e"]
