"""Running one program once: a coroutine as a task in the simulator's loop, a plain function in a thread.

:class:`ProgramRun` turns however the run ended into an :class:`Outcome` (exit code, reason, message) the
way a container runtime reports a process: returning is exit 0 ``Completed``; :class:`ProgramExit` carries
its code; an injected crash or any other exception is exit 1 ``Error`` with the exception as the message;
a run killed after the grace period is exit 137. Async runs can be cancelled; a thread cannot be killed,
so a thread that ignores its stop signal is abandoned (and logged).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any

from gpu_operator.sim.programs.context import InjectedCrashError, ProgramContext, ProgramExit, Signals
from gpu_operator.sim.programs.programs import ProgramSpec

log = logging.getLogger(__name__)
KILLED_EXIT_CODE = 137


@dataclass(frozen=True, kw_only=True)
class Outcome:
    exit_code: int
    reason: str
    message: str = ""


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # abandoned after the grace period
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class ProgramRun:
    """One started run of a program; ``await run.outcome()``."""

    def __init__(self, *, spec: ProgramSpec, ctx: ProgramContext, signals: Signals, label: str) -> None:
        self.spec = spec
        self.signals = signals
        self.label = label
        loop = asyncio.get_running_loop()
        if spec.threaded:
            future: asyncio.Future[None] = loop.create_future()

            def target() -> None:
                error: BaseException | None = None
                try:
                    spec.entrypoint(ctx)
                except BaseException as caught:  # reported as the container's termination, never lost
                    error = caught
                loop.call_soon_threadsafe(_settle, future, error)

            threading.Thread(target=target, name=f"program-{label}", daemon=True).start()
            self._waitable: asyncio.Future[Any] = future
        else:
            result = spec.entrypoint(ctx)
            if not inspect.isawaitable(result):
                raise TypeError(f"program {spec.name} is registered as async but returned {result!r}")
            self._waitable = asyncio.ensure_future(result)

    def stop(self) -> None:
        self.signals.stop()

    def crash(self, message: str) -> None:
        """Make the running program raise (async: cancelled at its next await; threads: at ``ctx.wait``)."""
        self.signals.crash(message)
        if not self.spec.threaded:
            self._waitable.cancel(message)

    def kill(self) -> None:
        """Stop waiting for it (the grace period is over)."""
        if self.spec.threaded and not self._waitable.done():
            log.warning("program %s ignored its stop signal; abandoning its thread", self.label)
        self._waitable.cancel()

    @property
    def done(self) -> bool:
        return self._waitable.done()

    async def outcome(self) -> Outcome:
        await asyncio.wait([self._waitable])
        # Retrieve the exception first, even when the crash message decides: asyncio logs unretrieved ones.
        error = None if self._waitable.cancelled() else self._waitable.exception()
        crash = self.signals.crash_message
        if crash is not None:
            return Outcome(exit_code=1, reason="Error", message=crash)
        if self._waitable.cancelled():
            return Outcome(exit_code=KILLED_EXIT_CODE, reason="Error", message="killed after the grace period")
        if error is None:
            return Outcome(exit_code=0, reason="Completed")
        if isinstance(error, ProgramExit):
            return Outcome(
                exit_code=error.code, reason="Completed" if error.code == 0 else "Error", message=error.message
            )
        if isinstance(error, InjectedCrashError):
            return Outcome(exit_code=1, reason="Error", message=str(error))
        log.error("program %s failed", self.label, exc_info=error)
        return Outcome(exit_code=1, reason="Error", message=f"{type(error).__name__}: {error}")
