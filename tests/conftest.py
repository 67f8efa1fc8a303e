"""Shared test helpers: repository paths, and the tier of each test, chosen by its directory.

Every test under ``tests/<tier>/`` gets the ``<tier>`` marker here (no file sets its own), so
``pytest -m contract`` and ``pytest tests/contract`` select the same tests. Unit tests also get a
2-second timeout unless they carry a ``timeout`` mark of their own, and tiers run in ``RUN_ORDER``;
the socket ban of the unit tier lives in ``tests/unit/conftest.py``. Tier fixtures live in each tier's conftest.
Every run ends with where its time went (``tests/timing.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

# Imported now, not by Hypothesis's pytest plugin in its end-of-run summary, which it does when no test
# did (a run of the integration tier alone): there, under assertion rewriting, at the end of a run that had
# started clusters, CPython 3.11.7 failed the import in 2 of 3 runs with "SystemError: AST constructor
# recursion depth mismatch", failing a green run.
import hypothesis  # noqa: F401
import pytest

from tests.timing import CONTINUE_ENV, TimingPlugin

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
SAMPLES = REPO / "deploy" / "samples"
INVALID = TESTS / "data" / "invalid"

TIERS = ("unit", "golden", "contract", "integration", "e2e", "gpu", "chaos")
#: The order tiers run in: the fast ones first, so a broken unit test fails a run in a minute, and the
#: session's control plane last, so its teardown (seconds: it stops etcd and the API server) falls on an
#: integration test's timeout and never on a unit test's 2 seconds. The chaos tier, which stops and
#: starts parts of a control plane of its own, comes last.
RUN_ORDER = ("unit", "golden", "contract", "gpu", "e2e", "integration", "chaos")
UNIT_TIMEOUT_S = 2


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the name of its directory right under ``tests/`` (None elsewhere)."""
    try:
        top = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return top if top in TIERS else None


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("test-timing"):
        timing = TimingPlugin(root=REPO, tier_of=lambda module: tier_of(REPO / module), order=RUN_ORDER,
                              output=REPO / "build" / "test-times.json",
                              resume=os.environ.get(CONTINUE_ENV) == "1")  # fmt: skip
        timing.time_waits()
        config.pluginmanager.register(timing, "test-timing")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: within a tier, files and tests keep pytest's order.
    items.sort(key=lambda item: RUN_ORDER.index(tier) if (tier := tier_of(item.path)) in RUN_ORDER else len(RUN_ORDER))
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            continue
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


@pytest.fixture
def repo_root() -> Path:
    return REPO
