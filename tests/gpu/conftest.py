"""Skip the real-GPU tier, saying why, unless NVML answers with at least one GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_operator.gpu.backend import GpuError, GpuNotFoundError
from tests.contract.harness import RealHarness


def _real_gpus_or_skip() -> None:
    try:
        harness = RealHarness()
    except GpuNotFoundError as exc:
        pytest.skip(f"no NVIDIA driver on this machine ({exc})")
    try:
        if not harness.backend.devices():
            pytest.skip("the NVIDIA driver is loaded but reports no GPU")
    except GpuError as exc:
        pytest.fail(f"NVML loaded but cannot list GPUs: {exc}")
    finally:
        harness.backend.close()


@pytest.fixture
def real_harness() -> Iterator[RealHarness]:
    _real_gpus_or_skip()
    harness = RealHarness()
    yield harness
    harness.backend.close()
