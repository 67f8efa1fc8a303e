"""One work key: woken by events, requeued by its own result, retried with a backoff, never killed by a pass.

``work`` is an ``async`` callable returning a :class:`Result`. The loop clears its wake event before
each pass, so a change that lands during the pass wakes it again at once; a woken loop waits
``coalesce`` seconds more so a burst (a spec change touches many objects) costs one pass, and with
``pace`` never starts a pass sooner than that many seconds after the previous one began (a long
stream of events, such as a fleet's pods turning ready, then costs one pass per ``pace``, while
the first change after a quiet spell is still handled at once; a failed pass is retried on its
backoff instead). Any
``Exception`` a pass raises is logged, counted by kind in :class:`LoopStats` and retried after the
backoff (or the API server's Retry-After); only cancellation ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpu_operator.runtime.backoff import Backoff, error_kind

#: Seconds between looks at a gate that is open but not confirmed (see ``Loop.fresh``).
STALE_POLL = 0.1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What a pass asks for: come back after ``after`` seconds (None: the loop's idle resync); with
    ``backoff`` the pass did not get what it needed, so the next delay is the backoff's instead."""

    after: float | None = None
    backoff: bool = False


@dataclass
class LoopStats:
    """Counters of one loop, exported in ``/metrics`` (``gpu_operator_loop_*{loop=...}``)."""

    passes: int = 0
    failures: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    last_error: str = ""
    last_success: float = 0.0  # wall-clock time of the last pass that did not raise

    def failed(self, error: BaseException) -> str:
        kind = error_kind(error)
        self.failures += 1
        self.errors[kind] += 1
        self.last_error = f"{kind}: {error}"
        return kind


async def pause(stop: asyncio.Event, *, wake: asyncio.Event | None, seconds: float, coalesce: float = 0.0) -> None:
    """Wait until ``seconds`` pass, ``stop`` is set or ``wake`` is set (then ``coalesce`` seconds more)."""
    waiters = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waiters.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waiters, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    if coalesce > 0 and wake is not None and wake.is_set() and not stop.is_set():
        await pause(stop, wake=None, seconds=coalesce)


@dataclass
class Loop:
    """Run ``work`` until ``stop``: on every wake-up, when its result says, and while ``gate`` is set."""

    name: str
    work: Callable[[], Awaitable[Result]]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Passes run only while this is set (leadership); a closed gate is checked every ``gate_poll`` s.
    gate: asyncio.Event | None = None
    gate_poll: float = 5.0
    #: With a gate: whether the gate's holder is still sure of it (a leader's Lease renewed in time).
    fresh: Callable[[], bool] | None = None
    idle: float = 60.0  # seconds between passes when nothing happens: a safety net, events do the work
    coalesce: float = 0.0
    pace: float = 0.0  # the least time between the starts of two passes woken by events
    backoff: Backoff = field(default_factory=Backoff)
    stats: LoopStats = field(default_factory=LoopStats)

    async def run(self, *, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.gate is not None and not self.gate.is_set():
                # Wait for the gate itself, not the wake event: changes keep arriving while a standby
                # waits (its caches stay warm), and waking on them would spin. The wake stays set, so
                # the first pass after the gate opens runs at once.
                await pause(stop, wake=self.gate, seconds=self.gate_poll)
                continue
            if self.fresh is not None and not self.fresh():
                # Open but unconfirmed (the process was paused, or renewals hang): no pass until the
                # holder renews or closes the gate, which its own loop does within a request.
                await pause(stop, wake=None, seconds=STALE_POLL)
                continue
            self.wake.clear()
            begun, failures = time.monotonic(), self.stats.failures
            delay = await self._pass()
            await pause(stop, wake=self.wake, seconds=delay, coalesce=self.coalesce)
            # Pacing spaces passes that succeed; a failed one is retried on its backoff's schedule.
            early = self.pace - (time.monotonic() - begun)
            if early > 0 and self.stats.failures == failures and not stop.is_set():
                await pause(stop, wake=None, seconds=early)

    async def _pass(self) -> float:
        try:
            result = await self.work()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the catch-all: a failed pass must never end the loop
            kind = self.stats.failed(error)
            delay = self.backoff.next(error)
            # The traceback once per kind of failure: a bug stays debuggable, an outage does not flood the log.
            log.warning("%s: pass failed (%s), retrying in %.1f s: %s", self.name, kind, delay, error,
                        exc_info=self.stats.errors[kind] == 1)  # fmt: skip
            return delay
        self.stats.passes += 1
        self.stats.last_success = time.time()
        if result.backoff:
            return self.backoff.next()
        self.backoff.reset()
        return self.idle if result.after is None else result.after
