"""The fleet report says where a missed target's figure came from: the phase of the RSS peak, and whether a
spec-change p99 is one outlier or a slow fleet."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import fleet_report  # type: ignore[import-not-found]  # a bench module, importable once bench/ is on the path


def test_peak_phase_names_the_phase_with_the_highest_sample() -> None:
    result = SimpleNamespace(peaks={"policy to ready": 205.0, "restart": 250.0, "spec changes": 604.0})
    assert fleet_report._peak_phase(result) == "highest in spec changes: 604"
    assert fleet_report._peak_phase(SimpleNamespace(peaks={})) == "no samples"


def test_slow_changes_counts_those_at_or_over_the_target() -> None:
    result = SimpleNamespace(change_latencies=[1.2, 3.1, 5.0, 26.6])
    assert fleet_report._slow_changes(result) == "2 of 4 at or over 5 s"
