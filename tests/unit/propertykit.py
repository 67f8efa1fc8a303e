"""What the property tests share: how many cases each tries, and running one case to its outcome."""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, settings

#: Cases per property (``HYPOTHESIS_EXAMPLES``); RELIABILITY.md reports the count each run tried.
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: The hostile properties: fifteen parsers, each case a whole file with a fragment thousands of characters
#: long, so ``make test`` tries fewer per parser; ``HYPOTHESIS_EXAMPLES`` (``make reliability``) sets both.
HOSTILE_SETTINGS = settings(SETTINGS, max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "25")))


def refusal(call: Callable[[], object], error: type[Exception]) -> str | None:
    """None when ``call`` succeeds, else the message of its ``error``; any other exception fails the test."""
    try:
        call()
    except error as exc:
        return str(exc)
    return None
