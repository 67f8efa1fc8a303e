"""The runtime's loop and backoff: a standby waits without spinning, Retry-After is a floor."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest

import gpu_operator.runtime.loop as loop_module
from gpu_operator.runtime.backoff import Backoff, error_kind, retry_after
from gpu_operator.runtime.loop import Loop, Result


def _status_error(code: int, retry: str | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://api.invalid/")
    headers = {"Retry-After": retry} if retry is not None else {}
    response = httpx.Response(code, headers=headers, request=request)
    return httpx.HTTPStatusError("failed", request=request, response=response)


def test_a_closed_gate_is_waited_on_not_polled_while_changes_keep_waking(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"pause": 0, "work": 0}
    real_pause = loop_module.pause

    async def counting(*args: Any, **kwargs: Any) -> None:
        calls["pause"] += 1
        await real_pause(*args, **kwargs)

    monkeypatch.setattr(loop_module, "pause", counting)

    async def scenario() -> None:
        async def work() -> Result:
            calls["work"] += 1
            return Result(after=60)

        gate, stop = asyncio.Event(), asyncio.Event()
        loop = Loop(name="t", work=work, gate=gate, gate_poll=60)
        loop.wake.set()  # the informers' first list woke it: a standby must still not spin
        task = asyncio.create_task(loop.run(stop=stop))
        for _ in range(200):
            await asyncio.sleep(0)
        assert calls == {"pause": 1, "work": 0}  # one wait on the gate, no pass
        gate.set()  # elected: the pending wake makes the first pass run at once
        for _ in range(50):
            await asyncio.sleep(0)
        assert calls["work"] == 1
        stop.set()
        await task

    asyncio.run(scenario())


def test_an_open_gate_whose_holder_is_not_fresh_runs_no_pass_until_it_is() -> None:
    """A leader woken from a pause: the gate is still open, but no pass runs before the Lease is renewed."""
    calls = {"work": 0}
    fresh = [False]

    async def scenario() -> None:
        async def work() -> Result:
            calls["work"] += 1
            return Result(after=60)

        gate, stop = asyncio.Event(), asyncio.Event()
        gate.set()
        loop = Loop(name="t", work=work, gate=gate, fresh=lambda: fresh[0])
        loop.wake.set()
        task = asyncio.create_task(loop.run(stop=stop))
        for _ in range(200):
            await asyncio.sleep(0)
        assert calls["work"] == 0
        fresh[0] = True  # the lease loop renewed
        await asyncio.wait_for(_until(lambda: calls["work"] == 1), timeout=1)
        stop.set()
        await task

    asyncio.run(scenario())


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


def test_a_failed_pass_is_counted_and_the_next_one_runs() -> None:
    async def scenario() -> Loop:
        results: list[Exception | Result] = [RuntimeError("boom"), Result(after=60)]

        async def work() -> Result:
            item = results.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

        loop = Loop(name="t", work=work, backoff=Backoff(initial=0.0, ceiling=0.0))
        stop = asyncio.Event()
        task = asyncio.create_task(loop.run(stop=stop))
        while loop.stats.passes < 1:
            await asyncio.sleep(0)
        stop.set()
        await task
        return loop

    loop = asyncio.run(scenario())
    assert (loop.stats.failures, loop.stats.passes, dict(loop.stats.errors)) == (1, 1, {"RuntimeError": 1})
    assert loop.stats.last_error == "RuntimeError: boom"


@pytest.mark.parametrize(
    ("header", "expected"), [("2", 2.0), ("0", None), ("-5", None), ("nan", None), ("soon", None), ("900", 60.0)]
)
def test_retry_after_is_read_only_when_it_asks_for_a_real_wait(header: str, expected: float | None) -> None:
    assert retry_after(_status_error(429, header)) == expected
    assert retry_after(_status_error(500, header)) is None  # only 429 and 503 carry it


def test_the_backoff_doubles_to_its_ceiling_and_takes_retry_after_as_a_floor() -> None:
    backoff = Backoff(initial=0.1, ceiling=0.4)
    assert [backoff.next() for _ in range(4)] == [0.1, 0.2, 0.4, 0.4]
    backoff.reset()
    assert backoff.next(_status_error(429, "2")) == 2.0  # the server asks for longer than our schedule
    assert backoff.next(_status_error(429, "0")) == 0.2  # "0" is no reason to retry sooner than our schedule
    assert error_kind(_status_error(503)) == "http_503"
    assert error_kind(httpx.ConnectError("refused")) == "ConnectError"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def _record_pauses(monkeypatch: pytest.MonkeyPatch) -> tuple[_Clock, list[tuple[float, bool]]]:
    """A fake clock for the loop, and every pause it takes as (seconds, woken by events); a pacing
    pause (no wake event) advances the clock by its full time, a wait for events returns at once."""
    clock = _Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    waits: list[tuple[float, bool]] = []

    async def recorded(
        stop: asyncio.Event, *, wake: asyncio.Event | None, seconds: float, coalesce: float = 0.0
    ) -> None:
        waits.append((round(seconds, 3), wake is not None))
        if wake is None:
            clock.now += seconds

    monkeypatch.setattr(loop_module, "pause", recorded)
    return clock, waits


def test_pace_spaces_passes_woken_by_a_stream_of_events(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, waits = _record_pauses(monkeypatch)

    async def scenario() -> int:
        stop = asyncio.Event()
        passes = 0

        async def work() -> Result:
            nonlocal passes
            passes += 1
            clock.now += 0.2  # the pass takes 0.2 s, and an event arrives meanwhile
            loop.wake.set()
            if passes == 3:
                stop.set()
            return Result(after=60)

        loop = Loop(name="t", work=work, pace=1.0)
        await loop.run(stop=stop)
        return passes

    assert asyncio.run(scenario()) == 3
    # After each pass: the wait for events (answered at once), then the rest of the pace: 1.0 - 0.2 s.
    assert waits[:4] == [(60, True), (0.8, False), (60, True), (0.8, False)]


def test_without_pace_a_woken_loop_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    _, waits = _record_pauses(monkeypatch)

    async def scenario() -> None:
        stop = asyncio.Event()
        count = 0

        async def work() -> Result:
            nonlocal count
            count += 1
            if count == 3:
                stop.set()
            return Result(after=60)

        await Loop(name="t", work=work).run(stop=stop)

    asyncio.run(scenario())
    assert [woken for _, woken in waits] == [True, True, True]


def test_a_failed_pass_is_retried_on_its_backoff_not_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    _, waits = _record_pauses(monkeypatch)

    async def scenario() -> None:
        stop = asyncio.Event()
        results: list[Exception | Result] = [RuntimeError("boom"), Result(after=60)]

        async def work() -> Result:
            item = results.pop(0)
            if not results:
                stop.set()
            if isinstance(item, Exception):
                raise item
            return item

        await Loop(name="t", work=work, pace=1.0, backoff=Backoff(initial=0.25, ceiling=1.0)).run(stop=stop)

    asyncio.run(scenario())
    assert waits == [(0.25, True), (60, True)]  # the backoff's delay, and no pacing wait after the failure
