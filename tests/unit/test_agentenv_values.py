"""The strict environment readers the small node agents share (agents/gfd/envinput.py)."""

from __future__ import annotations

import pytest

from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.api.envtext import env_choice, env_duration, env_flag, env_path

BAD_DURATIONS = ["1e999s", "inf", "nan", "9" * 5000, "\u0663\u0660s", "\u0663\u0660", "-5s", "5 s", "5x", "s", "1.s"]


def _duration(text: str) -> float | None:
    return env_duration({"X_INTERVAL": text}, "X_INTERVAL", default=60.0, minimum=1.0, maximum=86400.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("", 60.0), ("90", 90.0), ("2.5", 2.5), ("60s", 60.0), ("1m30s", 90.0), ("1h", 3600.0), ("1500ms", 1.5),
     ("1.5m", 90.0), ("2000000us", 2.0), ("24h", 86400.0)],
)  # fmt: skip
def test_good_durations_read_as_before(text: str, seconds: float) -> None:
    assert _duration(text) == seconds


@pytest.mark.parametrize("text", [*BAD_DURATIONS, "0.5", "25h", "0"])
def test_bad_durations_are_refused_in_one_line_naming_the_variable(text: str) -> None:
    with pytest.raises(ConfigRefusedError) as caught:
        _duration(text)
    message = str(caught.value)
    assert message.startswith("X_INTERVAL: ")
    assert "from 1s to 24h" in message
    assert "\n" not in message
    assert len(message) < 200


def test_a_duration_without_bare_seconds_needs_a_unit_and_special_words_pass() -> None:
    def read(text: str) -> float | None:
        env = {"D": text}
        return env_duration(env, "D", default=1.0, minimum=1.0, maximum=10.0, bare_seconds=False,
                            special={"infinite": None})  # fmt: skip

    assert read("infinite") is None
    assert read("5s") == 5.0
    with pytest.raises(ConfigRefusedError, match=r'^D: "5" is not a duration from 1s to 10s or "infinite"$'):
        read("5")


@pytest.mark.parametrize(("text", "value"), [("true", True), ("TRUE", True), ("1", True), ("on", True),
                                             ("false", False), ("0", False), ("Off", False), ("", True)])  # fmt: skip
def test_flags(text: str, value: bool) -> None:
    assert env_flag({"F": text}, "F", default=True) is value


@pytest.mark.parametrize("text", ["maybe", "truee", "\u0661", "yes\nno", "x" * 5000])
def test_a_flag_that_is_not_a_boolean_is_refused(text: str) -> None:
    # It used to read as false, silently: a typo in ENABLE_GPU_POD_EVICTION turned eviction off.
    with pytest.raises(ConfigRefusedError) as caught:
        env_flag({"F": text}, "F", default=True)
    assert str(caught.value).startswith("F: ")
    assert str(caught.value).endswith("is not true or false")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("relative/dir", "not an absolute path"), ("/a/../etc", "'..'"), ("/a\nb", "control character"),
     ("/" + "a" * 5000, "longer than 4096")],
)  # fmt: skip
def test_bad_paths_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ConfigRefusedError, match=f"^P: .*{problem}"):
        env_path({"P": text}, "P", default="/d")


def test_good_paths_and_choices() -> None:
    assert env_path({"P": "/run/x..y/z"}, "P", default="/d") == "/run/x..y/z"
    assert env_path({}, "P", default="/d") == "/d"
    assert env_choice({"C": "Open"}, "C", default="open", choices=("open", "auto")) == "open"
    with pytest.raises(ConfigRefusedError, match=r'^C: "kernel" is not one of open, auto$'):
        env_choice({"C": "kernel"}, "C", default="open", choices=("open", "auto"))
