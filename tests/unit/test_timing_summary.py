"""The end-of-run timing table (tests/timing.py): tiers in run order, modules slowest first."""

from __future__ import annotations

from tests.conftest import REPO, RUN_ORDER, tier_of
from tests.timing import Summary, summarise, table


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
