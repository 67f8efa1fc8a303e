"""The shared backend contract against real NVML (``hack/gpu-check.sh`` runs this tier on a GPU machine).

Checks that inject faults are left out: a real GPU cannot be made to fall off the bus on demand. The
MIG check changes the GPU's MIG mode and geometry, so it only runs with GPU_OPERATOR_TEST_MIG=1 (it
needs root, an idle GPU, and on drivers that keep the mode pending, a reset by hand).
"""

from __future__ import annotations

import os

import pytest

from tests.contract.checks import CHECKS
from tests.contract.harness import RealHarness

SAFE = sorted(name for name, check in CHECKS.items() if not check.needs_faults)


@pytest.mark.parametrize("check", SAFE)
def test_contract_on_real_gpus(check: str, real_harness: RealHarness) -> None:
    if CHECKS[check].changes_gpus and os.environ.get("GPU_OPERATOR_TEST_MIG") != "1":
        pytest.skip("changes MIG state on the real GPUs; set GPU_OPERATOR_TEST_MIG=1 to run it")
    CHECKS[check].run(real_harness)


def test_health_wait_times_out_quietly(real_harness: RealHarness) -> None:
    events = real_harness.backend.wait_health_events(timeout=0.1)
    assert all(e.uuid for e in events)
