"""Maintenance windows (our extension): when disruptive work may start, as cron schedules in a time zone.

A window opens at each time its ``schedule`` names (five cron fields: minute, hour, day of month,
month, day of week, or one of ``@hourly @daily @weekly @monthly @yearly``) and stays open for its
``duration`` (``90m``, ``4h``, ``1h30m``). Times are wall-clock times of ``timeZone`` (an IANA name; UTC
by default), so "02:00 on Saturdays" stays 02:00 across daylight-saving changes. As in Vixie cron,
when both day fields are restricted a day matching either one counts.

Daylight-saving changes follow Debian's cron, as the cronsim library implements it (we parse and check
the text; cronsim says when each opening happens). A schedule at a fixed time of day (its minute and hour
fields both name numbers) keeps to the calendar: an opening whose wall-clock time falls in a gap (02:30
on the night clocks go from 02:00 to 03:00) opens at the first minute after the gap (03:00) and stays
open its whole duration from there; an opening in a repeated hour (01:30 on the night clocks go back
from 02:00 to 01:00) opens once, at its first occurrence. A schedule with ``*`` in its minute or hour
field follows the clock: an hour that does not happen has no openings, and one that happens twice has
them twice. Numbers in schedules and durations are ASCII digits only (``int()`` would also take
fullwidth or Arabic-Indic digits), and a zone must name a zone file, not a tzdata directory such as
``America``. cronsim's extensions (a seconds field, ``L``, ``W``, ``#``) are refused: the CRD and the
docs describe the five classic fields only.

Pure: parsing refuses bad input with a message the offline validator puts next to the field, and
:class:`WindowSchedule` answers "open at t?" and "next opening after t?" for an epoch time it is
given (no clock here).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

from cronsim import CronSim, CronSimError
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = {3: {m: i + 1 for i, m in enumerate(_MONTHS)}, 4: {d: i for i, d in enumerate(_WEEKDAYS)}}
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?$")
DURATION_PATTERN = _DURATION.pattern
HORIZON_DAYS = 5 * 366  # a schedule that names no time within this never opens (e.g. 30 February)
_EPOCH_2000 = dt.datetime(2000, 1, 1, tzinfo=dt.UTC).timestamp()


@dataclass(frozen=True)
class Cron:
    """The minutes, hours, days, months and weekdays (0 = Sunday) a schedule names, and its five fields
    (macros expanded) as cronsim reads them."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool  # both day fields restricted: a day matching either counts
    # Compared too: "*/15" and "0,15,30,45" name the same minutes, but cron runs them apart in a DST change.
    text: str = ""

    def openings(self, *, zone: dt.tzinfo, after: float) -> Iterator[float]:
        """Epoch seconds of each opening at or after ``after``, in order, as cron runs them in ``zone``; ends
        past the horizon. In a repeated hour an opening that cronsim places at the hour's first occurrence
        may come before ``after``: callers skip those."""
        start = dt.datetime.fromtimestamp(math.ceil(after) - 1, zone)  # cronsim yields times after this
        limit = after + HORIZON_DAYS * 86400
        for opening in CronSim(self.text, start):
            epoch = opening.timestamp()
            if epoch > limit:
                return
            yield epoch


def parse_cron(text: str) -> Cron:
    """A schedule's five fields, or ValueError saying which field is wrong and why."""
    fields = _MACROS.get(text.strip().lower(), text).split()
    if len(fields) != len(_FIELDS):
        raise ValueError(f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    sets = [_field(value, index) for index, value in enumerate(fields)]
    weekdays = frozenset(d % 7 for d in sets[4])
    cron = Cron(minutes=sets[0], hours=sets[1], days=sets[2], months=sets[3], weekdays=weekdays,
                either_day=not fields[2].startswith("*") and not fields[4].startswith("*"),
                text=" ".join(fields))  # fmt: skip
    try:
        first = next(cron.openings(zone=dt.UTC, after=_EPOCH_2000), None)
    except CronSimError:  # cronsim's own check, a day no month of the schedule has (the fields were checked)
        first = None
    if first is None:
        raise ValueError(f"{text!r} names no time that exists (e.g. a day a month does not have)")
    return cron


def _field(text: str, index: int) -> frozenset[int]:
    name, low, high = _FIELDS[index]
    out: set[int] = set()
    for item in text.lower().split(","):
        span, _, step_text = item.partition("/")
        if span == "*":
            first, last = low, high
        else:
            start, dash, end = span.partition("-")
            first = _number(start, index)
            last = _number(end, index) if dash else (high if step_text else first)
        step = int(step_text) if _digits(step_text) and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"{name}: step {step_text!r} must be a positive number")
        if not low <= first <= last <= high:
            raise ValueError(f"{name}: {item!r} is outside {low}-{high} or runs backwards")
        out.update(range(first, last + 1, step or 1))
    return frozenset(out)


def _digits(text: str) -> bool:
    # str.isdigit() is true of fullwidth, Arabic-Indic and superscript digits too; cron reads ASCII only.
    return text.isascii() and text.isdigit()


def _number(text: str, index: int) -> int:
    name = _FIELDS[index][0]
    if _digits(text):
        return int(text)
    if text in _NAMES.get(index, {}):
        return _NAMES[index][text]
    raise ValueError(f"{name}: {text!r} is not a number" + (" or a name" if index in _NAMES else ""))


def parse_duration(text: str) -> dt.timedelta:
    """``90m``, ``4h``, ``1h30m`` as a timedelta; ValueError when malformed, zero or longer than a week."""
    match = _DURATION.match(text)
    if not text or match is None:
        raise ValueError(f"{text!r} must be hours and/or minutes, such as 90m, 4h or 1h30m")
    length = dt.timedelta(hours=int(match.group(1) or 0), minutes=int(match.group(2) or 0))
    if not dt.timedelta(minutes=1) <= length <= dt.timedelta(days=7):
        raise ValueError(f"{text!r} must be between 1m and 168h")
    return length


def parse_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name``, or ValueError. Besides ZoneInfoNotFoundError, ZoneInfo raises OSError for a
    tzdata directory ("America": IsADirectoryError) or an over-long name, ValueError for a file that is
    not a zone ("zone1970.tab") or a key that is not a normalised relative path."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise ValueError(f"{name!r} is not an IANA time zone name (such as UTC or Europe/Berlin)") from error


def _checked(kind: str, parse: Callable[[str], object]) -> AfterValidator:
    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as error:
            raise PydanticCustomError(kind, "{why}", {"why": str(error)}) from None
        return value

    return AfterValidator(check)


Schedule = Annotated[str, _checked("cron_schedule", parse_cron)]
WindowLength = Annotated[str, _checked("window_duration", parse_duration)]
TimeZone = Annotated[str, _checked("time_zone", parse_zone)]


@dataclass(frozen=True)
class WindowSchedule:
    """Windows in one time zone: ``(schedule, length)`` pairs, evaluated at epoch seconds."""

    zone: dt.tzinfo
    windows: tuple[tuple[Cron, dt.timedelta], ...]
    zone_name: str = "UTC"
    source: tuple[tuple[str, str], ...] = ()  # (schedule, duration) as written, for messages

    @classmethod
    def parse(cls, *, zone: str, windows: list[tuple[str, str]]) -> WindowSchedule:
        parsed = tuple((parse_cron(s), parse_duration(d)) for s, d in windows)
        return cls(zone=parse_zone(zone), windows=parsed, zone_name=zone, source=tuple(windows))

    def summary(self) -> str:
        """``'0 2 * * sat' for 4h, ... (Europe/Berlin)``."""
        return ", ".join(f"'{s}' for {d}" for s, d in self.source) + f" ({self.zone_name})"

    def _next_start(self, cron: Cron, t: float) -> float | None:
        """The first opening of ``cron`` at or after ``t``, in epoch seconds."""
        # A wall-clock time of a repeated hour whose first occurrence is before t opened then: skip it.
        return next((opens for opens in cron.openings(zone=self.zone, after=t) if opens >= t), None)

    def closes_at(self, t: float) -> float | None:
        """When a window open at ``t`` closes (per schedule, the one that opened first; the latest of those),
        or None when none is open. Windows that overlap their own repeats may stay open longer."""
        return _closes_at(self, t)

    def _closes_at(self, t: float) -> float | None:
        ends = []
        for cron, length in self.windows:
            # The last opening at or before t: the first one after t - length, if it is not after t.
            start = self._next_start(cron, t - length.total_seconds() + 1)
            if start is not None and start <= t:
                ends.append(start + length.total_seconds())
        return max(ends) if ends else None

    def is_open(self, t: float) -> bool:
        return self.closes_at(t) is not None

    def next_open(self, t: float) -> float | None:
        """``t`` when a window is open then, else the next opening (None: never again)."""
        if self.is_open(t):
            return t
        starts = [self._next_start(cron, t) for cron, _ in self.windows]
        found = [s for s in starts if s is not None]
        return min(found) if found else None

    def wait_reason(self, t: float) -> str:
        """ "" while a window is open at ``t``; else when the next one opens, for messages."""
        return _wait_reason(self, t)

    def describe(self, t: float) -> str:
        """An epoch time as wall-clock time in the windows' zone, for messages."""
        return dt.datetime.fromtimestamp(t, self.zone).strftime(f"%Y-%m-%d %H:%M {self.zone_name}")


# One upgrade pass asks for every waiting node at the same ``t``: each is answered once.
@functools.lru_cache(maxsize=64)
def _closes_at(schedule: WindowSchedule, t: float) -> float | None:
    return schedule._closes_at(t)


@functools.lru_cache(maxsize=64)
def _wait_reason(schedule: WindowSchedule, t: float) -> str:
    if schedule.is_open(t):
        return ""
    opens = schedule.next_open(t)
    return f"the next opens {schedule.describe(opens)}" if opens is not None else "none opens again"
