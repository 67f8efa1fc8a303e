"""Child processes that cannot outlive their parent.

Every component runs in its own process group (so a terminal's Ctrl-C reaches only the Python parent, which
then stops the components in order) and, on Linux, with ``PR_SET_PDEATHSIG`` = SIGKILL set through
``prctl`` before ``exec``: if the parent dies, even by SIGKILL, the kernel kills the child. The death
signal is tied to the *thread* that forked the child, so start clusters from a thread that lives as long as
the cluster (the main thread, normally).

Output goes to one log file per process; errors name that file and quote its last lines.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

PR_SET_PDEATHSIG = 1
DEFAULT_STOP_TIMEOUT = 10.0


class ProcessStartError(RuntimeError):
    """A component exited, or never became healthy, while the cluster was starting."""


def log_tail(path: Path, *, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _death_signal_setup(*, parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel to SIGKILL the child when its parent dies (Linux only).

    The libc function is resolved here, in the parent, so the child only makes the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    kill_signal = int(signal.SIGKILL)

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, kill_signal, 0, 0, 0)
        # The parent may have died between fork and prctl: then nothing would ever signal us.
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup


class ManagedProcess:
    """One component process with its log file."""

    def __init__(self, *, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> None:
        """Start the process; raise :class:`ProcessStartError` if it cannot be executed."""
        if self._popen is not None:
            raise RuntimeError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        self._log.flush()
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.env,
                close_fds=True,
                process_group=0,
                # Only prctl() and getppid() run in the child: safe even with threads in the parent.
                preexec_fn=_death_signal_setup(parent_pid=os.getpid()),  # noqa: PLW1509
            )
        except OSError as error:
            self._close_log()
            raise ProcessStartError(f"cannot run {self.name} ({self.argv[0]}): {error}") from error

    def exit_error(self) -> ProcessStartError:
        """The error describing an unexpected exit (or stall) of this process, with its log tail."""
        status = self.returncode
        what = f"exited with status {status}" if status is not None else "is still running but unhealthy"
        return ProcessStartError(
            f"{self.name} {what}; log: {self.log_path}\n--- last lines of {self.log_path.name} ---\n"
            f"{log_tail(self.log_path)}"
        )

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process group (ignored once it has exited)."""
        if self._popen is None or self._popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signum)

    def wait(self, *, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the exit; True when it has exited."""
        if self._popen is None:
            return True
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, *, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; reaps the child and closes the log."""
        self.signal(signal.SIGTERM)
        if not self.wait(timeout=timeout):
            self.signal(signal.SIGKILL)
            self.wait(timeout=timeout)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_all(processes: Sequence[ManagedProcess], *, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
    """Stop ``processes`` together: SIGTERM to all, wait, SIGKILL the stragglers."""
    for process in processes:
        process.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        process.stop(timeout=timeout)


def poll_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    describe: str,
    watch: Sequence[ManagedProcess] = (),
    blame: ManagedProcess | None = None,
    interval: float = 0.1,
) -> float:
    """Call ``check`` until it returns True; return the seconds it took.

    Raises the exit error of any process in ``watch`` that dies meanwhile, and on timeout a
    :class:`ProcessStartError` naming ``describe`` and quoting ``blame``'s log.
    """
    start = time.monotonic()
    deadline = start + timeout
    while True:
        for process in watch:
            if not process.is_running():
                raise process.exit_error()
        if check():
            return time.monotonic() - start
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout:.0f} s waiting for {describe}"
            if blame is not None:
                message += f"; log: {blame.log_path}\n--- last lines ---\n{log_tail(blame.log_path)}"
            raise ProcessStartError(message)
        time.sleep(interval)


def _raise_system_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


class SigtermAsExit:
    """Turns SIGTERM into ``SystemExit`` (so ``finally`` blocks and context managers stop the children) while
    installed; only from the main thread and only over the default handler, never over someone else's."""

    def __init__(self) -> None:
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous = signal.signal(signal.SIGTERM, _raise_system_exit)

    def restore(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
