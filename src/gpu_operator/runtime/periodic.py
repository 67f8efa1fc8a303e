"""The agents' API loops: do the work every ``seconds``, and survive any failure of a round.

An agent's container sleeps through ``ctx.sleep`` (True once it is asked to stop); :func:`every`
runs one round, and on an ``Exception`` logs it, counts it in the returned :class:`LoopStats` and
tries again after the backoff (never later than the regular interval), so an API server that is
briefly unreachable, slow, overloaded (429 with Retry-After) or answering 500 costs a retry, not the
container. :func:`attempt` is the same for one step of a polling wait (a validator's check, the driver
manager's wait for pods to go): a failed step means "not yet", not the end of the agent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpu_operator.runtime.backoff import Backoff, error_kind
from gpu_operator.runtime.loop import LoopStats

log = logging.getLogger(__name__)
T = TypeVar("T")


async def every(
    *,
    name: str,
    seconds: float | None,
    work: Callable[[], Awaitable[object]],
    sleep: Callable[[float | None], Awaitable[bool]],
    stats: LoopStats | None = None,
    backoff: Backoff | None = None,
) -> LoopStats:
    """Run ``work`` until ``sleep`` reports a stop; with ``seconds=None`` until one round succeeds."""
    stats = stats if stats is not None else LoopStats()
    backoff = backoff if backoff is not None else Backoff(initial=0.5, ceiling=30.0)
    while True:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the catch-all: a failed round must never end the agent
            kind = stats.failed(error)
            delay = backoff.next(error)
            if seconds is not None:
                delay = min(delay, seconds)
            log.warning("%s: round failed (%s), retrying in %.1f s: %s", name, kind, delay, error,
                        exc_info=stats.errors[kind] == 1)  # fmt: skip
        else:
            stats.passes += 1
            stats.last_success = time.time()
            backoff.reset()
            if seconds is None:
                return stats
            delay = seconds
        if await sleep(delay):
            return stats


@dataclass(frozen=True)
class Attempt(Generic[T]):
    """What one try of a step gave: its value, or the error it raised (then ``value`` is None)."""

    value: T | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


async def attempt(work: Callable[[], Awaitable[T]], *, name: str, stats: LoopStats | None = None) -> Attempt[T]:
    """Run one step of a polling wait; a failure is logged and counted, and the wait polls again."""
    try:
        return Attempt(value=await work())
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the catch-all of a polling step: "not yet", never the end of the agent
        kind = stats.failed(error) if stats is not None else error_kind(error)
        log.warning("%s: step failed (%s), polling again: %s", name, kind, error, exc_info=True)
        return Attempt(error=error)
