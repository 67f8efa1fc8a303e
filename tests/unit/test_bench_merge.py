"""``bench/run.py --only``: a section re-run replaces the previous report's, even when its scales changed."""

from __future__ import annotations

import sys
from typing import Any

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import run as bench_run  # type: ignore[import-not-found]  # a bench module, importable once bench/ is on the path

PREVIOUS = """# Benchmarks

## Local control plane: warm start

warm

## Local control plane: idle footprint

idle

## Operator at fleet scale: 1,000 and 2,500 simulated GPU nodes

old fleet
"""


def _ctx() -> Any:
    return bench_run.BenchContext(binaries=None, start_runs=1, idle_seconds=0.0, settle_seconds=0.0)


def test_a_section_measured_at_more_scales_replaces_the_old_one_in_place() -> None:
    fresh = bench_run.Section(
        title="Operator at fleet scale: 1,000 and 2,500 and 5,000 simulated GPU nodes", body="new"
    )
    merged = bench_run._merge_previous(sections=[fresh], previous=PREVIOUS, ctx=_ctx())
    assert [s.title for s in merged] == [
        "Local control plane: warm start",
        "Local control plane: idle footprint",
        "Operator at fleet scale: 1,000 and 2,500 and 5,000 simulated GPU nodes",
    ]
    assert merged[-1].body == "new"


def test_sections_differing_in_words_stay_apart() -> None:
    fresh = bench_run.Section(title="Local control plane: warm start", body="warm again")
    merged = bench_run._merge_previous(sections=[fresh], previous=PREVIOUS, ctx=_ctx())
    assert [s.body for s in merged] == ["warm again", "idle", "old fleet"]
