"""Maintenance windows: the cron schedules, the windows' arithmetic across time zones, and how the
upgrade planner, the controller's requeue and the preview keep to them (all at injected times)."""

from __future__ import annotations

import datetime as dt
import json
import re
import zoneinfo

import pytest
from rich.console import Console

from gpu_operator.api.validation import validate_document
from gpu_operator.api.windows import WindowSchedule, parse_cron, parse_duration
from gpu_operator.cli.upgrade import print_preview, to_json
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.controller import ACTIVE_REQUEUE, WINDOW_RECHECK, PartitionResult, UpgradeOutcome
from gpu_operator.upgrade.model import Snapshot
from gpu_operator.upgrade.plan import WINDOW_CLOSED
from gpu_operator.upgrade.preview import preview
from gpu_operator.upgrade.proposal import Proposal
from tests.unit.test_render_states import env, pod
from tests.unit.upgrade_builders import after, driver, knobs, node, run

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def at(text: str, zone: dt.tzinfo = dt.UTC) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def test_cron_fields_names_ranges_steps_and_macros() -> None:
    cron = parse_cron("*/15 1-3,22 * jan,jul mon-fri")
    assert cron.minutes == {0, 15, 30, 45}
    assert cron.hours == {1, 2, 3, 22}
    assert cron.months == {1, 7}
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert parse_cron("0 0 * * 7").weekdays == {0}  # 7 is Sunday too
    assert parse_cron("@weekly") == parse_cron("0 0 * * 0")
    assert parse_cron("5/20 * * * *").minutes == {5, 25, 45}


def test_either_day_field_matches_when_both_are_restricted() -> None:
    # Vixie cron: the 1st of the month or any Monday.
    cron = parse_cron("0 3 1 * mon")
    starts = cron.openings(zone=dt.UTC, after=at("2026-12-01T00:00"))
    days = [dt.datetime.fromtimestamp(next(starts), dt.UTC).date().isoformat() for _ in range(4)]
    assert days == ["2026-12-01", "2026-12-07", "2026-12-14", "2026-12-21"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 2 * *", "must have 5 fields"),
        ("0 24 * * *", "hour: '24' is outside 0-23"),
        ("0 2 * * funday", "day of week: 'funday' is not a number or a name"),
        ("*/0 * * * *", "minute: step '0' must be a positive number"),
        ("0 0 30 2 *", "names no time that exists"),
        ("5-1 * * * *", "runs backwards"),
    ],
)
def test_bad_schedules_say_which_field_and_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cron(text)


def test_durations() -> None:
    assert parse_duration("1h30m") == dt.timedelta(minutes=90)
    assert parse_duration("4h") == dt.timedelta(hours=4)
    for bad in ("", "3d", "0m", "169h", "1.5h"):
        with pytest.raises(ValueError, match="must be"):
            parse_duration(bad)


def test_a_window_in_a_time_zone_opens_and_closes_at_its_wall_clock_times() -> None:
    windows = WindowSchedule.parse(zone="Europe/Berlin", windows=[("0 2 * * sat", "4h")])
    saturday = "2026-12-05"  # a Saturday; Berlin is UTC+1 in December
    assert not windows.is_open(at(f"{saturday}T01:59", BERLIN))
    assert windows.next_open(at(f"{saturday}T01:59", BERLIN)) == at(f"{saturday}T02:00", BERLIN)
    assert windows.is_open(at(f"{saturday}T02:00", BERLIN))
    assert windows.closes_at(at(f"{saturday}T05:59", BERLIN)) == at(f"{saturday}T06:00", BERLIN)
    assert not windows.is_open(at(f"{saturday}T06:00", BERLIN))
    assert windows.next_open(at(f"{saturday}T06:00", BERLIN)) == at("2026-12-12T02:00", BERLIN)
    assert windows.describe(at(f"{saturday}T02:00", BERLIN)) == "2026-12-05 02:00 Europe/Berlin"


def test_a_window_keeps_its_wall_clock_time_across_a_daylight_saving_change() -> None:
    windows = WindowSchedule.parse(zone="Europe/Berlin", windows=[("30 3 * * *", "1h")])
    # Summer time ends on 2026-10-25: 03:30 is UTC+2 the day before and UTC+1 that day.
    assert windows.next_open(at("2026-10-24T12:00")) == at("2026-10-25T03:30", BERLIN)
    assert at("2026-10-25T03:30", BERLIN) - at("2026-10-24T03:30", BERLIN) == 25 * 3600
    # Summer time starts on 2026-03-29: 02:30 does not exist that day; the window opens when the gap
    # ends (03:00) and stays open its hour (test_windows_inputs.py has the short-window case).
    gap = WindowSchedule.parse(zone="Europe/Berlin", windows=[("30 2 * * *", "1h")])
    assert gap.next_open(at("2026-03-28T12:00")) == at("2026-03-29T03:00", BERLIN)
    assert gap.closes_at(at("2026-03-29T03:00", BERLIN)) == at("2026-03-29T04:00", BERLIN)


def test_any_open_window_counts_and_the_next_is_the_earliest() -> None:
    windows = WindowSchedule.parse(zone="UTC", windows=[("0 22 * * *", "2h"), ("0 12 * * sun", "30m")])
    assert windows.is_open(at("2026-12-06T12:10"))  # Sunday noon
    assert windows.is_open(at("2026-12-06T23:30"))  # the nightly one, across midnight
    assert windows.is_open(at("2026-12-07T00:00")) is False
    assert windows.next_open(at("2026-12-06T13:00")) == at("2026-12-06T22:00")


def test_the_policy_refuses_bad_windows_offline_with_each_field_named() -> None:
    doc = {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
        "spec": {"maintenanceWindows": {"timeZone": "Mars/Olympus", "windows": [
            {"schedule": "0 2 * * sat", "duration": "2d"}, {"schedule": "61 * * * *", "duration": "1h"}]}},
    }  # fmt: skip
    errors = {e.path: e.message for e in validate_document(doc, source="policy.yaml").errors}
    zone = "'Mars/Olympus' is not an IANA time zone name (such as UTC or Europe/Berlin)"
    assert errors == {
        "spec.maintenanceWindows.timeZone": zone,
        "spec.maintenanceWindows.windows[0].duration": "'2d' must be hours and/or minutes, such as 90m, 4h or 1h30m",
        "spec.maintenanceWindows.windows[1].schedule": "minute: '61' is outside 0-59 or runs backwards",
    }
    doc["spec"] = {"maintenanceWindows": {"windows": []}}
    assert [e.path for e in validate_document(doc, source="policy.yaml").errors] == ["spec.maintenanceWindows.windows"]


NIGHTLY = WindowSchedule.parse(zone="UTC", windows=[("0 2 * * *", "2h")])


def test_nodes_start_only_inside_a_window_and_one_under_way_carries_on() -> None:
    waiting = node("a", m.REQUIRED, drv=driver(sync=False))
    under_way = node("b", m.POD_RESTART, unschedulable=True, drv=driver(sync=True))
    closed = run([waiting, under_way], knobs(windows=NIGHTLY, max_parallel=2), now=at("2026-12-04T12:00"))
    step = closed.step("a")
    assert step is not None
    assert step.after == m.REQUIRED
    assert step.waiting == f"{WINDOW_CLOSED}: the next opens 2026-12-05 02:00 UTC"
    assert closed.window_opens == at("2026-12-05T02:00")
    assert after(closed, "b") != m.POD_RESTART  # the node under way went on
    opened = run([waiting], knobs(windows=NIGHTLY), now=at("2026-12-05T02:00"))
    assert opened.started == ("a",)
    assert opened.window_opens is None


def test_the_controller_sleeps_until_the_window_opens_at_most_a_recheck_long() -> None:
    def outcome(wake_in: float | None, **counts: int) -> UpgradeOutcome:
        part = PartitionResult(partition="", knobs=knobs(windows=NIGHTLY), counts=counts, wake_in=wake_in)
        return UpgradeOutcome(partitions=(part,))

    assert outcome(None, **{m.REQUIRED: 2}).requeue_after is None
    assert outcome(60.0, **{m.REQUIRED: 2}).requeue_after == 60.0
    assert outcome(50_000.0, **{m.REQUIRED: 2}).requeue_after == WINDOW_RECHECK
    assert outcome(0.0, **{m.REQUIRED: 2}).requeue_after == ACTIVE_REQUEUE


def test_the_preview_starts_each_wave_when_a_window_is_open() -> None:
    # Friday 23:00 UTC; one node at a time; a 2 h window each night from 02:00; an install takes 50 min.
    nodes = tuple(node(name, m.DONE, drv=driver(sync=False, name=f"driver-{name}")) for name in ("a", "b", "c"))
    snapshot = Snapshot(nodes=nodes, now=at("2026-12-04T23:00"))
    result = preview(snapshot, knobs(windows=NIGHTLY, max_parallel=1), install_seconds=50 * 60)
    starts = [at("2026-12-04T23:00") + w.start_seconds for w in result.waves]
    # a and b fit in the first night's window; c would start at 03:40, still inside; all three the first night.
    assert [w.nodes for w in result.waves] == [("a",), ("b",), ("c",)]
    assert starts[0] == at("2026-12-05T02:00")
    assert all(NIGHTLY.is_open(t) for t in starts)
    # A window too short for more than one node a night: one wave per night.
    short = WindowSchedule.parse(zone="UTC", windows=[("0 2 * * *", "30m")])
    nightly = preview(snapshot, knobs(windows=short, max_parallel=1), install_seconds=50 * 60)
    days = [dt.datetime.fromtimestamp(at("2026-12-04T23:00") + w.start_seconds, dt.UTC) for w in nightly.waves]
    assert [(d.day, d.hour) for d in days] == [(5, 2), (6, 2), (7, 2)]


def test_the_mig_manager_gets_the_windows_only_when_the_policy_has_them() -> None:
    windows = {"timeZone": "Europe/Berlin", "windows": [{"schedule": "0 2 * * sat", "duration": "4h"}]}
    container = pod({"maintenanceWindows": windows}, "nvidia-mig-manager")["containers"][0]
    assert json.loads(env(container)["MIG_MAINTENANCE_WINDOWS"]) == windows
    assert "MIG_MAINTENANCE_WINDOWS" not in env(pod({}, "nvidia-mig-manager")["containers"][0])


def test_the_plan_command_prints_each_wave_at_its_wall_clock_start() -> None:
    berlin = WindowSchedule.parse(zone="Europe/Berlin", windows=[("0 2 * * sat", "4h")])
    nodes = tuple(node(name, m.DONE, drv=driver(sync=False, name=f"driver-{name}")) for name in ("a", "b"))
    snapshot = Snapshot(nodes=nodes, now=at("2026-12-04T12:00"))
    k = knobs(windows=berlin, max_parallel=1)
    result = preview(snapshot, k, install_seconds=600)
    proposal = Proposal(snapshot=snapshot, knobs=k, install_seconds=600, measured=False)
    doc = to_json(result, proposal)
    assert [w["startsAt"] for w in doc["waves"]] == ["2026-12-05T02:00+01:00", "2026-12-05T02:10+01:00"]
    assert doc["maintenanceWindows"] == "'0 2 * * sat' for 4h (Europe/Berlin)"
    console = Console(record=True, width=200)
    print_preview(console, result, proposal)
    text = console.export_text()
    assert "Nodes start only inside the maintenance windows: '0 2 * * sat' for 4h (Europe/Berlin)" in text
    assert "2026-12-05T02:10+01:00" in text
