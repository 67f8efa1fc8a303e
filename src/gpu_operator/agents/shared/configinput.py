"""Reading what a node agent is configured with (files, annotations, environment) without ever crashing.

Every input a node agent reads is someone else's text: a ConfigMap key, a pod annotation, an
environment value. Python's own readers fail on such text with exceptions no caller expects
(``UnicodeDecodeError`` for one non-UTF-8 byte, ``RecursionError`` for lists nested 100000 deep,
``ValueError`` from ``int()`` past 4300 digits, the same from ``repr()`` of such an int in an error
message), and an agent that lets one escape prints a traceback and crash-loops. The helpers here turn
each into one line that names the source (file, annotation or variable) and, where it is known, the
field:

- :func:`read_text` reads a file as UTF-8;
- :func:`load_json` parses JSON with integers bounded to 18 digits, nesting to ``max_depth`` and no
  duplicate keys, and refuses each naming the field; it, :func:`check_string_keys` (mapping keys that are
  not strings, YAML's ``1: x``) and :func:`describe` (a value in an error message) live in
  :mod:`gpu_operator.api.jsontext`, shared with the offline validation and the operator;
- :func:`env_seconds` and :func:`env_int` read a bounded number from an environment variable;
- :class:`ReloadLog` is what an agent keeps about one reloaded input: how many new bad versions it
  refused (``<prefix>config_reload_failures_total``), the last error, and the Node Events to send
  (``ConfigRefused``, a Warning) saying whether the last good config is still in use.
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from gpu_operator.api.jsontext import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    ConfigRefusedError,
    ErrorFactory,
    check_string_keys,
    describe,
    load_json,
    one_line,
)

log = logging.getLogger(__name__)

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "ConfigRefusedError",
    "ErrorFactory",
    "ReloadLog",
    "check_string_keys",
    "describe",
    "env_int",
    "env_seconds",
    "load_json",
    "one_line",
    "read_small_file",
    "read_text",
]

REFUSED_REASON = "ConfigRefused"
_INTEGER = re.compile(r"^-?[0-9]+$")
ACCEPTED_REASON = "ConfigAccepted"


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


def read_small_file(path: Path, *, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path``; None when it is missing, unreadable or not a
    regular file. Opened without blocking and checked on the open file, so a FIFO (where
    ``PCI_DEVICES_DIR`` or a machine type file points at one) never blocks, even if swapped in."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as source:
            return source.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


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
