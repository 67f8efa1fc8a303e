"""The backend contract over every backend this machine has: simulated, and NVML over the fake library.

The NVML backend runs each check in a fresh process (``worker``): pynvml binds the library once per
process, and a fresh NVML per check also exercises init and shutdown every time.
"""

from __future__ import annotations

import pytest

from tests.contract.checks import CHECKS
from tests.contract.conftest import RunPython
from tests.contract.harness import SimHarness

# MIG with a reset-needing A100 on PCIe; an 8-GPU NVSwitch H100 node; PCIe-only L4s without MIG.
PROFILES = ["a100-mig", "dgx-h100", "pcie-l4"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("backend", ["simulated", "nvml-fake"])
def test_contract(backend: str, check: str, profile: str, request: pytest.FixtureRequest) -> None:
    if backend == "simulated":
        harness = SimHarness(profile)
        try:
            CHECKS[check].run(harness)
        finally:
            harness.backend.close()
        return
    run_python: RunPython = request.getfixturevalue("run_python")
    result = run_python("-m", "tests.contract.worker", check, profile, profile=profile)
    assert result.returncode == 0, f"{check} on NVML over the fake library failed:\n{result.stdout}{result.stderr}"
