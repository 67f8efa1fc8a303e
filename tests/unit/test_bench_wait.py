"""The benchmarks' polling (``operator_bench._wait``): a probe the API server was too busy to answer is
"not yet", never the end of a run that took an hour to set up; a real error still ends it."""

from __future__ import annotations

import sys

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import operator_bench  # type: ignore[import-not-found]  # a bench module, importable once bench/ is on the path


def _probe(*answers: object) -> object:
    left = list(answers)

    def check() -> bool:
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    return check


def test_busy_answers_are_not_yet() -> None:
    busy = ApiError(status=Status(code=503, message="too busy"))
    handshake = httpx2.ConnectTimeout("_ssl.c:989: The handshake operation timed out")
    check = _probe(handshake, busy, False, True)
    assert operator_bench._wait(check, timeout=60, interval=0) is not None


def test_a_real_error_still_ends_the_wait() -> None:
    forbidden = ApiError(status=Status(code=403, message="forbidden"))
    with pytest.raises(ApiError):
        operator_bench._wait(_probe(False, forbidden), timeout=60, interval=0)
