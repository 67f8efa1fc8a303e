"""Maintenance windows at the edges: zone names that are tzdata directories, digits that are not ASCII,
cronsim's extensions, and openings in the hour a daylight-saving change skips or repeats (fixed dates,
America/New_York), for schedules at a fixed time of day and for hourly ones."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import pytest
from cronsim import CronSim

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


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("0 0 L * *", "day of month: 'l' is not a number"),
        ("0 0 LW * *", "day of month: 'lw' is not a number"),
        ("0 0 * * 5#2", "day of week: '5#2' is not a number or a name"),
        ("0 0 * * 5L", "day of week: '5l' is not a number or a name"),
        ("0 0 2 * * *", "must have 5 fields"),
    ],
)
def test_cronsims_extensions_are_refused(schedule: str, message: str) -> None:
    # cronsim would run them; the CRD and the docs describe the five classic fields, so they are refused.
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cron(schedule)


@pytest.mark.parametrize(
    "schedule",
    ["*/15 1-3,22 * jan,jul mon-fri", "5/20 * * * *", "0 0 * * 7", "1-10/3 */5 1,15 * sun-sat", "0 2 29 2 *",
     "30 4 1-7 * 1", "@weekly", "@hourly", "0 0 31 jan-dec *", "59 23 * DEC SAT"],
)  # fmt: skip
def test_the_fields_we_check_are_the_fields_cronsim_runs(schedule: str) -> None:
    cron = parse_cron(schedule)
    ran = CronSim(cron.text, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    ours = (cron.minutes, cron.hours, cron.days, cron.months)
    assert ours == tuple(frozenset(s) for s in (ran.minutes, ran.hours, ran.days, ran.months))
    assert all(isinstance(d, int) for d in ran.weekdays)  # no "L" or "#" items: those are refused
    assert cron.weekdays == {d % 7 for d in ran.weekdays if isinstance(d, int)}
    assert cron.either_day == (not ran.day_and)


def test_an_hourly_schedule_follows_the_clock_across_both_changes() -> None:
    # No opening at 02:30 on the day 02:00-03:00 is skipped; two at 01:30 on the day 01:00-02:00 repeats.
    windows = WindowSchedule.parse(zone="America/New_York", windows=[("30 * * * *", "10m")])
    assert windows.next_open(utc("2026-03-08T06:45")) == utc("2026-03-08T07:30")  # 01:45 EST -> 03:30 EDT
    assert windows.next_open(utc("2026-11-01T05:00")) == utc("2026-11-01T05:30")  # 01:30 EDT
    assert windows.next_open(utc("2026-11-01T05:45")) == utc("2026-11-01T06:30")  # 01:30 EST, once more
    assert windows.is_open(utc("2026-11-01T06:35"))


def test_schedules_naming_the_same_minutes_differently_are_not_equal() -> None:
    # cron runs "*/30 1 * * *" by the clock and "0,30 1 * * *" by the calendar in a repeated hour.
    assert parse_cron("*/30 1 * * *") != parse_cron("0,30 1 * * *")
    by_clock = WindowSchedule.parse(zone="America/New_York", windows=[("*/30 1 * * *", "5m")])
    by_calendar = WindowSchedule.parse(zone="America/New_York", windows=[("0,30 1 * * *", "5m")])
    assert by_clock.next_open(utc("2026-11-01T05:45")) == utc("2026-11-01T06:00")  # 01:00 EST, the second one
    assert by_calendar.next_open(utc("2026-11-01T05:45")) == at("2026-11-02T01:00")
