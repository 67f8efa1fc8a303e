"""The peer benchmark's verdicts (``bench/peer_targets.py``): read back from the report's table, so a
wrong parse or comparison would state a target met that the table shows missed."""

from __future__ import annotations

import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import peer_targets  # type: ignore[import-not-found]  # a bench module, importable once bench/ is on the path

REPORT = """# Benchmarks

## Something else

| measure | a | b | c |
|---|---:|---:|---:|
| CPU to `ready` (s) | 0.01 | 9.00 | x |

## Ours beside NVIDIA's gpu-operator: 100 simulated GPU nodes, one run

Text.

| measure | ours | NVIDIA's v25.3.4 | NVIDIA's / ours |
|---|---:|---:|---:|
| CPU to `ready` (s) | 5.15 | 0.77 | 0.15x |
| spec change p99 (s) | 0.40 | 2.00 | 4.96x |
| API requests, policy -> rolled out | 2,550 | 2,550 | 1.00x |
| RSS peak (MiB) | n/a | 108 | n/a |
"""


def test_rows_come_from_the_peer_section_only() -> None:
    rows = peer_targets.rows_from_report(REPORT)
    assert rows["CPU to `ready` (s)"] == ("5.15", "0.77")
    assert rows["API requests, policy -> rolled out"] == ("2,550", "2,550")


def test_verdicts_quote_the_figures_and_ties_are_met() -> None:
    lines: list[str] = peer_targets.markdown(peer_targets.rows_from_report(REPORT)).splitlines()

    def row(label: str) -> str:
        return next(line for line in lines if f"({label}) |" in line)

    assert row("CPU to `ready` (s)").endswith("| 5.15 | 0.77 | **missed** |")
    assert row("spec change p99 (s)").endswith("| 0.40 | 2.00 | met |")
    assert row("API requests, policy -> rolled out").endswith("| 2,550 | 2,550 | met |")
    assert row("RSS peak (MiB)").endswith("| n/a | 108 | n/a |")
    assert row("CPU to rolled out (s)").endswith("| n/a | n/a | n/a |")


def test_no_peer_table_says_so() -> None:
    assert "run `bench/run.py --only peer_operators`" in peer_targets.markdown({})


def _rows(ready: tuple[str, str], rolled_out: tuple[str, str]) -> dict[str, tuple[str, str]]:
    return {
        peer_targets.READY: ready,
        peer_targets.ROLLED_OUT: rolled_out,
        peer_targets.CPU_READY: ("2.89", "0.98"),
        peer_targets.CPU_ROLLED_OUT: ("2.89", "4.42"),
    }


def test_a_ready_before_the_rollout_is_explained_with_the_same_work_compared() -> None:
    text = peer_targets.markdown(_rows(ready=("33.5", "15.0"), rolled_out=("33.5", "50.2")))
    assert "reported `ready` 15 s after the policy, 35.2 s before its DaemonSets were rolled out (50.2 s)" in text
    assert "ours used 2.89 CPU-s against NVIDIA's 4.42" in text


def test_no_explanation_when_both_say_ready_at_rolled_out() -> None:
    assert peer_targets.ready_note(_rows(ready=("33.5", "50.0"), rolled_out=("33.5", "50.2"))) == ""
    assert peer_targets.ready_note({}) == ""
