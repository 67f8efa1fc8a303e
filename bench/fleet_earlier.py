"""Scales of the fleet section measured by an earlier run, read back from BENCHMARKS.md.

One scale takes from ten minutes (1,000 nodes) to most of an hour (5,000) on this machine, so a change that
matters at one scale is measured again there alone. With ``FLEET_BENCH_KEEP_EARLIER=1`` the fleet section
keeps, for each scale this run did not measure, what the report already says of it: its row of the main
table (whose commit column says which code ran), its targets row, its per-phase tables, and the figures the
plot draws. Nothing is recomputed: the rows are the earlier run's own text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SECTION_PREFIX = "Operator at fleet scale:"


@dataclass(frozen=True, kw_only=True)
class EarlierScale:
    nodes: int
    row: str  # the main table's row, as written
    target_row: str  # the targets table's row
    notes: str  # the "### N nodes" subsection
    peak_rss_mib: float
    cpu_to_rolled_out_s: float
    idle_per_second: float  # idle requests besides the Lease
    change_p99_s: float


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _first_number(text: str) -> float:
    found = re.search(r"[\d,]+(?:\.\d+)?", text)
    if found is None:
        raise ValueError(f"no figure in {text!r}")
    return float(found.group(0).replace(",", ""))


def earlier_scales(report: str) -> dict[int, EarlierScale]:
    """Each scale of the report's fleet section (empty when the report has none)."""
    chunk = next((c for c in report.split("\n## ") if c.startswith(SECTION_PREFIX)), "")
    rows: dict[int, str] = {}
    targets: dict[int, str] = {}
    for line in chunk.splitlines():
        if not line.startswith("| ") or line.startswith("| nodes") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if not re.fullmatch(r"[\d,]+( \(\d+\))?", cells[0]):
            continue  # a per-phase table's row
        nodes = int(_first_number(cells[0]))
        (rows if "(" in cells[0] else targets)[nodes] = line
    notes = {int(_first_number(part)): "### " + part.strip("\n") for part in chunk.split("\n### ")[1:]}
    out = {}
    for nodes, row in rows.items():
        cells = _cells(row)
        out[nodes] = EarlierScale(
            nodes=nodes, row=row, target_row=targets.get(nodes, ""), notes=notes.get(nodes, ""),
            peak_rss_mib=_first_number(cells[5].split("/")[1]), cpu_to_rolled_out_s=_first_number(cells[4]),
            idle_per_second=_first_number(cells[6]), change_p99_s=_first_number(cells[7].split("/")[1]),
        )  # fmt: skip
    return out
