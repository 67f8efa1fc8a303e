"""Strict readers for the environment values of the node agents and the NIC backends.

GFD, the MPS control daemon, NIC feature discovery, the OFED driver, the driver manager, discovery,
the node-status exporter and the NIC backends read flags, durations, paths and names from their
environment. Each reader here either returns the value the agent used before for a good value or
raises :class:`~gpu_operator.api.jsontext.ConfigRefusedError` whose message is one line
naming the variable: a duration of ``1e999s`` or of 5000 digits, Arabic-Indic digits (which
``int()``/``float()`` accept), ``inf``/``nan``, a flag of ``maybe`` (which used to mean false), a path
with ``..`` or a newline. Every duration is bounded, so no agent sleeps for ever or spins.

Pure text checks, so they live at the bottom layer beside :mod:`gpu_operator.api.jsontext` (whose
:class:`ConfigRefusedError` they raise): the agents and the NIC backends below them both use them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from gpu_operator.api.jsontext import ConfigRefusedError, describe

__all__ = [
    "MAX_TEXT",
    "env_choice",
    "env_duration",
    "env_flag",
    "env_path",
    "env_text",
    "format_seconds",
]

MAX_TEXT = 253  # the longest DNS name: enough for any name, label or selector these agents read
_MAX_DURATION_TEXT = 32
_MAX_PATH = 4096
_TRUE = ("1", "t", "true", "y", "yes", "on")  # Go's strconv.ParseBool plus the shell's yes/on
_FALSE = ("0", "f", "false", "n", "no", "off")
# Go's time.ParseDuration units; [0-9], not \d, so that no other script's digits are read.
_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]{1,18}(?:\.[0-9]{1,18})?|\.[0-9]{1,18})(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_DURATION = re.compile(f"(?:{_PART.pattern})+")
_NUMBER = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?")


def format_seconds(value: float) -> str:
    """``3600`` -> ``1h``, ``90`` -> ``90s``, ``0.5`` -> ``500ms``: the bounds in error messages."""
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g}h"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}m"
    if value < 1 and value:
        return f"{value * 1000:g}ms"
    return f"{value:g}s"


def _duration(text: str, *, bare: bool) -> float | None:
    if len(text) > _MAX_DURATION_TEXT:
        return None
    if bare and _NUMBER.fullmatch(text):
        return float(text)
    if text == "0":
        return 0.0  # Go's ParseDuration accepts a bare 0 only
    if not _DURATION.fullmatch(text):  # whole text only: no trailing newline or stray characters
        return None
    return sum(float(part.group(1)) * _UNITS[part.group(2)] for part in _PART.finditer(text))


def env_duration(
    env: Mapping[str, str],
    name: str,
    *,
    default: float,
    minimum: float,
    maximum: float,
    bare_seconds: bool = True,
    special: Mapping[str, float | None] | None = None,
) -> float | None:
    """``env[name]`` as seconds: a Go duration (``60s``, ``1m30s``, ``500ms``) or, with ``bare_seconds``,
    a plain number of seconds (``90``, ``2.5``); ``default`` when unset or empty.

    ``special`` maps words to their values (GFD's ``infinite`` -> None). The result is finite and from
    ``minimum`` to ``maximum``; anything else is refused naming ``name``.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if special and raw in special:
        return special[raw]
    value = _duration(raw, bare=bare_seconds)
    if value is None or not math.isfinite(value) or not minimum <= value <= maximum:
        kind = "a duration (or number of seconds)" if bare_seconds else "a duration"
        words = "".join(f" or {describe(word)}" for word in special or {})
        raise ConfigRefusedError(
            f"{name}: {describe(raw)} is not {kind} from {format_seconds(minimum)} to {format_seconds(maximum)}{words}"
        )
    return value


def env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """``env[name]`` as true/false (``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``, any case);
    ``default`` when unset or empty. Anything else is refused: it used to mean false, silently."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigRefusedError(f"{name}: {describe(raw)} is not true or false")


def env_choice(env: Mapping[str, str], name: str, *, default: str, choices: Sequence[str]) -> str:
    """``env[name]`` lower-cased, one of ``choices``; ``default`` when unset or empty."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() not in choices:
        raise ConfigRefusedError(f"{name}: {describe(raw)} is not one of {', '.join(choices)}")
    return raw.lower()


def env_path(env: Mapping[str, str], name: str, *, default: str) -> str:
    """``env[name]`` as an absolute path (``default`` when unset or empty) without ``..``, control
    characters or more than 4096 characters: it names where an agent reads or writes on the node."""
    raw = env.get(name, "")
    if not raw.strip():
        return default
    problem = ""
    if len(raw) > _MAX_PATH:
        problem = f"longer than {_MAX_PATH} characters"
    elif any(ord(c) < 32 or ord(c) == 127 for c in raw):
        problem = "has a control character"
    elif not raw.startswith("/"):
        problem = "is not an absolute path"
    elif ".." in raw.split("/"):
        problem = "has a '..' component"
    if problem:
        raise ConfigRefusedError(f"{name}: {describe(raw)} {problem}")
    return raw


def env_text(
    env: Mapping[str, str], name: str, *, default: str, pattern: re.Pattern[str], what: str, limit: int = MAX_TEXT
) -> str:
    """``env[name]`` stripped (``default`` when unset or empty) when it fully matches ``pattern`` and has at
    most ``limit`` characters; otherwise refused as not ``what``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if len(raw) > limit or not raw.isascii() or not pattern.fullmatch(raw):
        raise ConfigRefusedError(f"{name}: {describe(raw)} is not {what}")
    return raw
