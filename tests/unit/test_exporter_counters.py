"""The counter CSV: the default set, comments and spacing, malformed files with line numbers, unknown fields."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpu_operator.agents.exporter.collector import CounterSource
from gpu_operator.agents.exporter.counters import FIELDS, CsvError, default_counters, parse_counters
from gpu_operator.gpu.telemetry import NVML_SOURCES


def test_default_set_matches_dcgm_exporter_defaults() -> None:
    counters = default_counters()
    names = [c.field for c in counters.metrics]
    assert names[:4] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
    ]
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_PCIE_RX_BYTES"} <= set(names)
    types = {c.field: c.type for c in counters.metrics}
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert types["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "counter"
    assert types["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"
    assert types["DCGM_FI_DEV_XID_ERRORS"] == "gauge"
    assert [c.field for c in counters.labels] == ["DCGM_FI_DRIVER_VERSION"]
    assert not counters.unknown
    assert len(names) == 25  # 20 device fields and 5 profiling fields, as upstream enables by default


def test_comments_blank_lines_and_spaces_are_tolerated() -> None:
    text = """
# a comment
   # an indented comment
DCGM_FI_DEV_DEC_UTIL ,  gauge ,  Decoder use.

DCGM_FI_DEV_GPU_TEMP,gauge,"Temperature, in C."
DCGM_FI_DRIVER_VERSION, label, Driver
"""
    counters = parse_counters(text)
    assert [(c.field, c.type, c.help) for c in counters.metrics] == [
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder use."),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "Temperature, in C."),
    ]
    assert [c.field for c in counters.labels] == ["DCGM_FI_DRIVER_VERSION"]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge\n", 1, "expected 3 fields"),
        ("# c\n\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_FB_USED, gauge, a, b\n", 4, "found 4"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_FB_USED, histogram, h\n", 2, "unknown type 'histogram'"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, t\nnot a name, gauge, h\n", 2, "not a field name"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, t\n\nDCGM_FI_DEV_GPU_TEMP, gauge, again\n", 3, "already listed on line 1"),
        ("DCGM_FI_DRIVER_VERSION, gauge, d\n", 1, "text field: its type must be label"),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "unterminated\n', 1, "not a CSV record"),
    ],
)
def test_malformed_csv_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(CsvError) as caught:
        parse_counters(text, source="/etc/dcgm-exporter/dcgm-metrics.csv")
    assert caught.value.line == line
    assert f"/etc/dcgm-exporter/dcgm-metrics.csv: line {line}: " in str(caught.value)
    assert words in str(caught.value)


def test_unknown_counters_are_reported_and_skipped() -> None:
    text = "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_NOPE, gauge, n\nDCGM_EXP_XID_ERRORS_COUNT, gauge, x\n"
    counters = parse_counters(text)
    assert [c.field for c in counters.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert counters.unknown == ((2, "DCGM_FI_DEV_NOPE"), (3, "DCGM_EXP_XID_ERRORS_COUNT"))
    message = counters.describe_unknown(source="x.csv")
    assert message == (
        "x.csv: skipping counters this exporter does not know: DCGM_FI_DEV_NOPE (line 2), "
        "DCGM_EXP_XID_ERRORS_COUNT (line 3)"
    )


def test_every_default_counter_is_served() -> None:
    assert all(c.field in FIELDS for c in default_counters().metrics)


def test_source_keeps_the_previous_set_when_the_file_breaks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    csv = tmp_path / "dcgm-metrics.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", encoding="utf-8")
    source = CounterSource(path=csv)
    assert [c.field for c in source.current().metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert not source.changed()

    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_FB_USED gauge used\n", encoding="utf-8")
    assert source.changed()
    with caplog.at_level(logging.ERROR):
        assert [c.field for c in source.current().metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert "line 2: expected 3 fields" in caplog.text
    assert "keeping the previous counters" in caplog.text
    assert source.errors == 1

    csv.write_text("DCGM_FI_DEV_FB_USED, gauge, used\nDCGM_FI_DEV_TYPO, gauge, t\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert [c.field for c in source.current().metrics] == ["DCGM_FI_DEV_FB_USED"]
    assert "DCGM_FI_DEV_TYPO (line 2)" in caplog.text

    csv.unlink()
    assert [c.field for c in source.current().metrics] == ["DCGM_FI_DEV_FB_USED"]


def test_source_without_a_file_uses_the_defaults(tmp_path: Path) -> None:
    assert CounterSource(path=None).current() == default_counters()
    missing = CounterSource(path=tmp_path / "absent.csv")
    assert missing.current() == default_counters()
    (tmp_path / "absent.csv").write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", encoding="utf-8")
    assert [c.field for c in missing.current().metrics] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_every_field_names_the_nvml_call_behind_it() -> None:
    assert {name: f.reading for name, f in FIELDS.items() if f.reading not in NVML_SOURCES} == {}
