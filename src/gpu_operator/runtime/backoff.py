"""How long to wait after a failure: doubling delays, and the API server's own ``Retry-After``.

Failures are named for the metrics by kind (``ConnectError``, ``ReadTimeout``) or, for API errors,
by HTTP status (``http_429``): few distinct values, so the label set stays small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Upper bound on an API server's Retry-After we honour: a bogus header must not park a loop for hours.
MAX_RETRY_AFTER = 60.0


def status_code(error: BaseException) -> int | None:
    """The HTTP status of an API error (lightkube's ``ApiError`` and httpx's status errors), else None."""
    response = getattr(error, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def retry_after(error: BaseException) -> float | None:
    """Seconds the API server asked us to wait (429 or 503 with ``Retry-After: <seconds>``), else None."""
    if status_code(error) not in (429, 503):
        return None
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    try:
        seconds = float(headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None  # absent, or an HTTP date: fall back to our own backoff
    if not math.isfinite(seconds) or seconds <= 0:
        return None  # "0", negative or nan: no reason to retry sooner than our own schedule
    return min(seconds, MAX_RETRY_AFTER)


def error_kind(error: BaseException) -> str:
    """A short, low-cardinality name of a failure, for logs and metric labels."""
    code = status_code(error)
    return f"http_{code}" if code is not None else type(error).__name__


@dataclass
class Backoff:
    """Delays of ``initial`` doubling to ``ceiling``; :meth:`reset` after a success."""

    initial: float = 0.1
    ceiling: float = 3.0
    _next: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._next = self.initial

    def reset(self) -> None:
        self._next = self.initial

    def next(self, error: BaseException | None = None) -> float:
        """The delay before the next try; a Retry-After in ``error`` wins over our own schedule."""
        delay = self._next
        self._next = min(self._next * 2, self.ceiling)
        asked = retry_after(error) if error is not None else None
        # The server's wait is a floor: never retry sooner than it asked, nor sooner than our schedule.
        return max(asked, delay) if asked is not None else delay
