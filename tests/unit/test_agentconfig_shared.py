"""The shared readers of node agents' inputs: every failure is one line naming the source and the field."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.shared.configinput import (
    MAX_JSON_DEPTH,
    ConfigRefusedError,
    ReloadLog,
    check_string_keys,
    describe,
    env_int,
    env_seconds,
    load_json,
    read_text,
)
from gpu_operator.agents.shared.httpserver import parse_listen


class Events:
    """An event sink in memory."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bool]] = []

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
        self.sent.append((reason, message, warning))


def _refused(text: str) -> str:
    with pytest.raises(ConfigRefusedError) as caught:
        load_json(text, source="cfg.json", error=ConfigRefusedError)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cfg.json: ")
    return message


def test_deep_nesting_is_refused_in_one_line() -> None:
    assert "nested" in _refused("[" * 100_000 + "]" * 100_000)
    assert "nested more than" in _refused('{"a": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "}")


def test_a_huge_integer_is_refused_naming_its_field() -> None:
    message = _refused('{"configList": [{"rdmaHcaMax": ' + "9" * 5000 + "}]}")
    assert message == "cfg.json: configList[0].rdmaHcaMax: an integer of 5000 digits; no field takes more than 18"


def test_ordinary_json_is_read_as_is() -> None:
    assert load_json('{"a": [1, -2, 3.5, "x"]}', source="s", error=ConfigRefusedError) == {"a": [1, -2, 3.5, "x"]}
    assert "not valid JSON: Expecting" in _refused('{"a": ')


def test_keys_that_are_not_strings_are_refused_naming_the_path() -> None:
    with pytest.raises(ConfigRefusedError, match=r"^f: a\.b\.1: the key 1 is not a string$"):
        check_string_keys({"a": {"b": {1: "x"}}}, source="f", error=ConfigRefusedError)


def test_describe_never_fails() -> None:
    assert describe(10**5000).startswith("an integer of about 500")
    assert describe("x" * 1000) == '"' + "x" * 56 + "..."
    assert describe([[]] * 3) == "a list of 3 items"
    assert describe(True) == "true"


def test_read_text_refuses_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigRefusedError, match=r"^/cm/c\.yaml: not UTF-8 text \(byte 3 is 0xff\)$"):
        read_text(path, source="/cm/c.yaml", error=ConfigRefusedError)


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-1", "1e400", "9" * 5000])
def test_env_seconds_refuses_what_is_not_a_bounded_number(raw: str) -> None:
    with pytest.raises(ConfigRefusedError, match=r"^INTERVAL: .* is not a number of seconds from 0 to 60$"):
        env_seconds({"INTERVAL": raw}, "INTERVAL", default=1.0, maximum=60.0)
    assert env_seconds({"INTERVAL": " 2.5 "}, "INTERVAL", default=1.0, maximum=60.0) == 2.5
    assert env_seconds({}, "INTERVAL", default=1.0) == 1.0


def test_env_int_refuses_out_of_range_and_long_text() -> None:
    for raw in ("--5", "5000", "9" * 5000, "²"):
        with pytest.raises(ConfigRefusedError, match=r"^N: "):
            env_int({"N": raw}, "N", default=1, minimum=0, maximum=100)
    assert env_int({"N": "-3"}, "N", default=1, minimum=-5, maximum=100) == -3


def test_reload_log_counts_each_new_bad_version_once_and_reports_it() -> None:
    events = Events()
    log = ReloadLog(name="agent", source="cfg", events=events, metric_prefix="x_")
    log.refused("cfg: first bad")  # before any good config
    log.accepted()
    log.refused("cfg: second bad")
    log.refused("cfg: second bad")  # the same file read again: not a new failure
    asyncio.run(log.flush())
    assert log.failures == 2
    assert events.sent == [
        ("ConfigRefused", "agent: cfg: first bad; no good config yet, nothing served", True),
        ("ConfigAccepted", "agent: cfg accepted", False),
        ("ConfigRefused", "agent: cfg: second bad; keeping the last good config", True),
    ]
    assert "x_config_reload_failures_total 2\n" in log.render()


def test_a_listen_address_with_a_huge_port_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigRefusedError, match=r"^DP_METRICS_LISTEN: not an address: \"?:9999"):
        parse_listen(":" + "9" * 5000, variable="DP_METRICS_LISTEN")
    assert parse_listen("127.0.0.1:9402", variable="DP_METRICS_LISTEN") == ("127.0.0.1", 9402)
