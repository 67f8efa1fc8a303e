"""Reading what a node agent is configured with (files, annotations, environment) without ever crashing.

Every input a node agent reads is someone else's text: a ConfigMap key, a pod annotation, an
environment value. Python's own readers fail on such text with exceptions no caller expects
(``UnicodeDecodeError`` for one non-UTF-8 byte, ``RecursionError`` for lists nested 100000 deep,
``ValueError`` from ``int()`` past 4300 digits, the same from ``repr()`` of such an int in an error
message), and an agent that lets one escape prints a traceback and crash-loops. The helpers here turn
each into one line that names the source (file, annotation or variable) and, where it is known, the
field:

- :func:`read_text` reads a file as UTF-8;
- :func:`load_json` parses JSON with integers bounded to 18 digits and nesting to ``max_depth``, and
  refuses both naming the field;
- :func:`check_string_keys` refuses mapping keys that are not strings (YAML's ``1: x``), naming the path;
- :func:`describe` renders a value for an error message, short and safe for any size;
- :func:`env_seconds` and :func:`env_int` read a bounded number from an environment variable;
- :class:`ReloadLog` is what an agent keeps about one reloaded input: how many new bad versions it
  refused (``<prefix>config_reload_failures_total``), the last error, and the Node Events to send
  (``ConfigRefused``, a Warning) saying whether the last good config is still in use.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: The longest integer any of these inputs takes: 18 digits still fits a signed 64-bit field upstream.
MAX_INT_DIGITS = 18
#: How deep the JSON of a config may nest: the deepest real one (a CNI ``cni-args``) is a handful.
MAX_JSON_DEPTH = 32
REFUSED_REASON = "ConfigRefused"
_INTEGER = re.compile(r"^-?[0-9]+$")
ACCEPTED_REASON = "ConfigAccepted"


class ConfigRefusedError(ValueError):
    """An input an agent cannot use; the message is one line naming the input and the field.

    Every agent's own config error derives from it, so whoever runs an agent (``gpu-operator agent``)
    can print the message alone instead of a traceback."""


ErrorFactory = Callable[[str], Exception]


class _Oversized:
    """A JSON integer too long for any field: kept as its length so the field that holds it is named."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(text: str) -> int | _Oversized:
    digits = len(text.lstrip("-"))
    return _Oversized(digits) if digits > MAX_INT_DIGITS else int(text)


def one_line(text: str, *, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (error messages quote user text)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe(value: object, *, limit: int = 60) -> str:
    """A short rendering of ``value`` for an error message; never fails, whatever its size or depth."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if value.bit_length() > 60:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return str(value)
    if isinstance(value, float | str):
        text = json.dumps(value) if isinstance(value, str) else repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    return f"a {type(value).__name__}"


def read_text(path: Path, *, source: str, error: ErrorFactory) -> str:
    """``path`` as UTF-8 text; ``error(message)`` (naming ``source``) when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{source}: cannot read: no such file") from None
    except UnicodeDecodeError as exc:
        raise error(f"{source}: not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})") from None
    except OSError as exc:
        raise error(f"{source}: cannot read: {exc.strerror or exc}") from None


def _path(parent: str, key: object) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


def _walk(data: Any, *, source: str, error: ErrorFactory, max_depth: int, string_keys: bool) -> None:
    # Iterative: a recursive walk would itself fail on the nesting it is meant to refuse.
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        at = where or "(top level)"
        if isinstance(value, _Oversized):
            raise error(f"{source}: {at}: {value!r}; no field takes more than {MAX_INT_DIGITS}")
        if not isinstance(value, dict | list):
            continue
        if depth > max_depth:
            raise error(f"{source}: {at}: nested more than {max_depth} levels deep")
        if isinstance(value, list):
            stack.extend((item, _path(where, i), depth + 1) for i, item in enumerate(value))
            continue
        for key, item in value.items():
            if string_keys and not isinstance(key, str):
                raise error(f"{source}: {_path(where, describe(key))}: the key {describe(key)} is not a string")
            stack.append((item, _path(where, key), depth + 1))


def load_json(text: str, *, source: str, error: ErrorFactory, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in ``text``; ``error(message)`` naming ``source`` (and the field, where known) for
    invalid JSON, an integer longer than :data:`MAX_INT_DIGITS` digits, or nesting past ``max_depth``."""
    try:
        data = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise error(f"{source}: not usable JSON: nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # e.g. a float Python cannot read
        raise error(f"{source}: not usable JSON: {one_line(str(exc))}") from None
    _walk(data, source=source, error=error, max_depth=max_depth, string_keys=False)
    return data


def check_string_keys(data: Any, *, source: str, error: ErrorFactory, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse (``error``) a mapping key that is not a string (YAML reads ``1: x`` with the int 1) or
    nesting past ``max_depth``, naming the path."""
    _walk(data, source=source, error=error, max_depth=max_depth, string_keys=True)


def env_seconds(
    env: Mapping[str, str], name: str, *, default: float, minimum: float = 0.0, maximum: float = 86400.0
) -> float:
    """``env[name]`` as seconds (``default`` when unset or empty), finite and within the bounds."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw) if len(raw) <= 32 else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise ConfigRefusedError(
            f"{name}: {describe(raw)} is not a number of seconds from {minimum:g} to {maximum:g}"
        ) from None
    return value


def env_int(env: Mapping[str, str], name: str, *, default: int, minimum: int, maximum: int) -> int:
    """``env[name]`` as a whole number (``default`` when unset or empty) within the bounds."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if len(raw) > MAX_INT_DIGITS or not _INTEGER.fullmatch(raw) or not minimum <= int(raw) <= maximum:
        raise ConfigRefusedError(f"{name}: {describe(raw)} is not a whole number from {minimum} to {maximum}")
    return int(raw)


class EventSink(Protocol):
    """Where Node Events go (``agents.shared.cluster.NodeCluster`` is one)."""

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None: ...


class ReloadLog:
    """What an agent keeps about one input it re-reads while running (a config file or ConfigMap).

    ``refused`` is called with each failed read: a new error (a new bad version of the input) is
    counted, logged once and queued as a Warning Event; the same error again is not (the agent re-reads
    every few seconds). ``accepted`` after a good read logs and queues the recovery. Safe to call from a
    worker thread: Events are only queued there, and :meth:`flush` sends them on the event loop.
    """

    def __init__(self, *, name: str, source: str, events: EventSink | None = None, metric_prefix: str = "") -> None:
        self.name = name
        self.source = source
        self.failures = 0  # new bad versions refused since start: the counter metric
        self.last_error: str | None = None
        self.has_good = False  # whether a good config was ever accepted (then it is the one kept)
        self._events = events
        self._prefix = metric_prefix
        self._pending: list[tuple[str, str, bool]] = []

    def refused(self, message: str) -> None:
        message = one_line(message, limit=900)
        if message == self.last_error:
            return
        self.failures += 1
        self.last_error = message
        kept = "keeping the last good config" if self.has_good else "no good config yet, nothing served"
        log.error("%s: config refused (%s): %s", self.name, kept, message)
        self._pending.append((REFUSED_REASON, f"{self.name}: {message}; {kept}", True))

    def accepted(self) -> None:
        if self.last_error is not None:
            log.info("%s: %s accepted again", self.name, self.source)
            self._pending.append((ACCEPTED_REASON, f"{self.name}: {self.source} accepted", False))
        self.last_error = None
        self.has_good = True

    async def flush(self) -> None:
        """Send the queued Events (best effort: a config's use never depends on them)."""
        pending, self._pending = self._pending, []
        if self._events is None:
            return
        for reason, message, warning in pending:
            try:
                await self._events.event(reason=reason, message=message, warning=warning)
            except Exception as exc:
                log.debug("%s: event %s not recorded: %s", self.name, reason, exc)

    def render(self) -> str:
        """The counter as Prometheus exposition text."""
        name = f"{self._prefix}config_reload_failures_total"
        return (
            f"# HELP {name} New versions of the config that were refused (the last good one kept serving).\n"
            f"# TYPE {name} counter\n{name} {self.failures}\n"
        )
