"""Polling with a deadline, for code and tests that wait on an eventually-consistent cluster.

``wait_for(check, timeout=..., describe=...)`` calls ``check`` until it returns something truthy and returns
that value; on timeout it raises :class:`WaitTimeoutError` naming what was awaited and the last value (or
exception) seen, which is usually what explains the failure. Exceptions listed in ``retry_on`` count as
"not yet"; any other exception propagates at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(TimeoutError):
    """A :func:`wait_for` deadline passed."""


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout: float,
    describe: str,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``check`` every ``interval`` seconds until it returns a truthy value, at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
        except retry_on as error:
            last = error
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(f"timed out after {timeout:g} s waiting for {describe}; last seen: {last!r}")
        time.sleep(interval)
