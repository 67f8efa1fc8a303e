"""Running one bad input through its entry point and judging the outcome.

A case writes its files into an empty directory, calls the entry point the way a user or the node does
(the command line through click, an agent's loader on a file, a parser on an annotation's text), and the
outcome must be a refusal: exactly one line of error text that names the file or object and the field,
no traceback, no hang (a 5 s alarm stops it), at most 1 s of CPU, and every file in the directory as it
was, byte for byte. CPU time rather than wall time is measured so that a busy CI machine does not fail a
case; a blocked read (a FIFO) uses no CPU and is what the alarm is for.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from click import Command
from click.testing import CliRunner

#: A file entry that is made as a named pipe instead of a regular file.
FIFO = object()


@dataclass(frozen=True)
class Sparse:
    """A file entry made as a sparse file of ``size`` bytes (zeros, no disk used)."""

    size: int


CPU_LIMIT_S = 1.0
HANG_LIMIT_S = 5.0


@dataclass(frozen=True)
class Outcome:
    """What the entry point did: refused (with the error text) or accepted, or failed otherwise."""

    refused: bool
    text: str
    crash: str = ""  # an unexpected exception's type, or "hang"


@dataclass(frozen=True)
class Case:
    """One bad input: the files it needs, how to run it, and what its error must name."""

    entry: str
    name: str
    run: Callable[[Path], Outcome]
    expect: tuple[str, ...]
    files: Mapping[str, bytes | object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.entry}: {self.name}"


@dataclass(frozen=True)
class Verdict:
    """The judged outcome of one case; ``problems`` is empty when the case passed."""

    case: Case
    line: str
    cpu_s: float
    problems: tuple[str, ...]


class _HangError(Exception):
    """Raised by the alarm in the entry point's frame, ending a blocked call."""


def _alarm(_sig: int, _frame: FrameType | None) -> None:
    raise _HangError


@contextmanager
def _hang_guard() -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_fifo():
            out[rel] = "fifo"
        elif path.is_file() and path.stat().st_size > 1 << 20:
            out[rel] = f"{path.stat().st_size} bytes, mtime {path.stat().st_mtime_ns}"
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "dir"
    return out


def _make(root: Path, files: Mapping[str, bytes | object]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, Sparse):
            with path.open("wb") as out:
                out.truncate(content.size)
        else:
            raise TypeError(f"{name}: a case file is bytes, FIFO or Sparse")


def run(case: Case, root: Path) -> Verdict:
    """Make the case's files under ``root`` (an empty directory), run it, and judge it."""
    _make(root, case.files)
    before = _snapshot(root)
    start = time.process_time()
    try:
        with _hang_guard():
            outcome = case.run(root)
    except _HangError:
        outcome = Outcome(refused=False, text="", crash="hang")
    except Exception as exc:  # the case itself must not raise: an escaped exception is a crash
        outcome = Outcome(refused=False, text=str(exc), crash=type(exc).__name__)
    cpu = time.process_time() - start
    lines = [line for line in outcome.text.splitlines() if line.strip()]
    problems: list[str] = []
    if outcome.crash:
        problems.append(f"crashed ({outcome.crash})")
    elif not outcome.refused:
        problems.append("accepted")
    if "Traceback" in outcome.text:
        problems.append("printed a traceback")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines of error, not one")
    text = " ".join(lines)
    problems.extend(f"error does not name {want!r}" for want in case.expect if want not in text)
    if cpu > CPU_LIMIT_S:
        problems.append(f"took {cpu:.2f} s of CPU")
    if _snapshot(root) != before:
        problems.append("changed files on disk")
    return Verdict(case=case, line=text, cpu_s=cpu, problems=tuple(problems))


def cli(command: Command, *args: str) -> Callable[[Path], Outcome]:
    """Run a click command with ``{dir}`` in its arguments replaced by the case's directory.

    A refusal is a non-zero exit with the error on stderr; what the command printed to stdout does not
    count as error text.
    """

    def call(root: Path) -> Outcome:
        argv = [a.replace("{dir}", str(root)) for a in args]
        result = CliRunner().invoke(command, argv, catch_exceptions=True)
        exc = result.exception
        if isinstance(exc, _HangError):
            raise exc
        if exc is not None and not isinstance(exc, SystemExit):
            return Outcome(refused=False, text=result.stderr, crash=type(exc).__name__)
        return Outcome(refused=result.exit_code != 0, text=result.stderr)

    return call


def raises(func: Callable[[Path], object], *errors: type[BaseException]) -> Callable[[Path], Outcome]:
    """Call ``func(dir)``; a refusal is one of ``errors``, whose message is the error text."""

    def call(root: Path) -> Outcome:
        try:
            func(root)
        except errors as exc:
            return Outcome(refused=True, text=str(exc))
        return Outcome(refused=False, text="")

    return call
