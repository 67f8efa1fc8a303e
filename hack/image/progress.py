"""Progress on stderr for the image build (what is built and why, each step and its time) and the one
helper that runs a command, says what it runs, and fails with the command's own output."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

_START = time.monotonic()


class BuildError(RuntimeError):
    """A step of the image build failed; the message says which and what to do."""


def log(message: str) -> None:
    """One progress line on stderr, prefixed with the seconds since the build started."""
    print(f"[image {time.monotonic() - _START:6.1f}s] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(title: str) -> Iterator[None]:
    """Log the start and the duration of one step."""
    log(f"{title} ...")
    begin = time.monotonic()
    yield
    log(f"{title}: {time.monotonic() - begin:.1f} s")


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    quiet: bool = False,
) -> str:
    """Run ``argv``; return its stdout. A non-zero exit raises :class:`BuildError` with its stderr."""
    command = [str(arg) for arg in argv]
    if not quiet:
        log(f"  $ {shlex.join(command)}" if len(command) < 12 else f"  $ {shlex.join(command[:11])} ...")
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"`{shlex.join(command)}` exited {result.returncode}:\n{result.stderr.strip() or result.stdout.strip()}"
        )
    return result.stdout
