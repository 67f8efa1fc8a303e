"""An asyncio program in a background thread of this process: the one runner the demo and the tests use.

``main(stop)`` runs on the thread's own event loop until it returns; :meth:`LoopThread.stop` sets
``stop`` from any thread and waits. :meth:`LoopThread.restart` replaces the thread and its loop with
fresh ones, as a restarted process would start with nothing. What ``main`` raised is kept in
``error`` (a demo reports it and tears down; a test asserts on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self


class LoopThread:
    """Run ``main(stop)`` in a thread with its own event loop (see the module docstring)."""

    def __init__(self, *, name: str, main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        self.name = name
        self.main = main
        self.error: BaseException | None = None
        self._fresh()

    def _fresh(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop_event = asyncio.Event()
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def _run(self) -> None:
        # This run's own loop and event: a restart after a stop that timed out must not swap them here.
        loop, stop = self.loop, self.stop_event
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.main(stop))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except BaseException as error:  # kept for the caller: a thread has nobody else to tell
            self.error = error
        finally:
            loop.close()  # an unclosed loop leaks its self-pipe sockets into whatever runs next

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self, *, timeout: float = 30.0) -> None:
        if self.thread.is_alive():  # stopped already when main returned (or a test stopped it early)
            with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
                self.loop.call_soon_threadsafe(self.stop_event.set)
            self.thread.join(timeout=timeout)
            if self.thread.is_alive():
                raise TimeoutError(f"{self.name} did not stop within {timeout:g} s")

    def restart(self) -> None:
        """Stop, then start again on a new thread and loop: nothing of the old run is kept."""
        self.stop()
        self._fresh()
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
