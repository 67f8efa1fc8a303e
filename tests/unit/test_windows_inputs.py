"""Maintenance windows at the edges: zone names that are tzdata directories, digits that are not ASCII,
and openings in the hour a daylight-saving change skips or repeats (fixed dates, America/New_York)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from gpu_operator.api.windows import WindowSchedule, parse_cron, parse_duration, parse_zone

NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def at(text: str, zone: dt.tzinfo = NEW_YORK) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def utc(text: str) -> float:
    return at(text, dt.UTC)


@pytest.mark.parametrize(
    "name", ["America", "Etc", "Europe", "zone1970.tab", "America/", "", "../etc/passwd", "x" * 300]
)
def test_a_zone_that_is_not_a_zone_file_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"is not an IANA time zone name \(such as UTC or Europe/Berlin\)$") as raised:
        parse_zone(name)
    assert type(raised.value) is ValueError
    with pytest.raises(ValueError, match="is not an IANA time zone name"):
        WindowSchedule.parse(zone=name, windows=[("0 2 * * *", "1h")])


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("\uff11 2 * * *", "minute: '\uff11' is not a number"),  # fullwidth one
        ("0 \u0662 * * *", "hour: '\u0662' is not a number"),  # Arabic-Indic two
        ("0 2 \u00b2 * *", "day of month: '\u00b2' is not a number"),  # superscript two: int() raises
        ("*/\u0665 2 * * *", "minute: step '\u0665' must be a positive number"),
        ("0 2-\u0663 * * *", "hour: '\u0663' is not a number"),
    ],
)
def test_cron_numbers_are_ascii_digits_only(schedule: str, message: str) -> None:
    with pytest.raises(ValueError, match="number") as raised:
        parse_cron(schedule)
    assert str(raised.value) == message


@pytest.mark.parametrize("text", ["\uff11h", "\u0663\u0660m", "1h\u0663m"])
def test_durations_are_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match="must be hours and/or minutes"):
        parse_duration(text)


def test_an_opening_in_the_skipped_hour_opens_when_the_gap_ends_and_stays_open_its_duration() -> None:
    # 2026-03-08: New York's clocks go from 02:00 EST straight to 03:00 EDT (07:00 UTC); 02:30 never happens.
    windows = WindowSchedule.parse(zone="America/New_York", windows=[("30 2 * * *", "30m")])
    assert windows.next_open(at("2026-03-08T00:00")) == utc("2026-03-08T07:00")
    assert not windows.is_open(utc("2026-03-08T06:59:59"))
    assert windows.is_open(utc("2026-03-08T07:00"))
    assert windows.closes_at(utc("2026-03-08T07:10")) == utc("2026-03-08T07:30")
    assert not windows.is_open(utc("2026-03-08T07:30"))
    assert windows.next_open(utc("2026-03-08T07:30")) == at("2026-03-09T02:30")
    assert windows.wait_reason(at("2026-03-08T00:00")) == "the next opens 2026-03-08 03:00 America/New_York"


def test_an_opening_in_the_repeated_hour_opens_once_at_its_first_occurrence() -> None:
    # 2026-11-01: clocks go back from 02:00 EDT (06:00 UTC) to 01:00 EST; 01:30 happens twice.
    windows = WindowSchedule.parse(zone="America/New_York", windows=[("30 1 * * *", "20m")])
    assert windows.next_open(at("2026-11-01T00:00")) == utc("2026-11-01T05:30")
    assert windows.closes_at(utc("2026-11-01T05:40")) == utc("2026-11-01T05:50")
    assert not windows.is_open(utc("2026-11-01T06:35"))  # 01:35 EST, the second 01:35
    assert windows.next_open(utc("2026-11-01T06:10")) == at("2026-11-02T01:30")
