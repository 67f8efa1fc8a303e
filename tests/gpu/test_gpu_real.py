"""The shared backend contract against real NVML (``hack/gpu-check.sh`` runs this tier on a GPU machine).

Checks that inject faults are left out: a real GPU cannot be made to fall off the bus on demand. The
MIG check changes the GPU's MIG mode and geometry, so it only runs with GPU_OPERATOR_TEST_MIG=1 (it
needs root, an idle GPU, and on drivers that keep the mode pending, a reset by hand).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

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
    """A healthy GPU reports nothing: the wait returns no event, and only after its timeout."""
    began = time.monotonic()
    events = real_harness.backend.wait_health_events(timeout=0.5)
    assert [e for e in events if e.xid is not None or e.lost] == [], events
    assert 0.4 <= time.monotonic() - began < 5.0


_SMI_FIELDS = "uuid,name,driver_version,memory.total,temperature.gpu,power.draw,clocks.mem"


def test_readings_match_nvidia_smi(real_harness: RealHarness) -> None:
    """What the exporter would serve, next to what nvidia-smi reads from the same driver (printed for
    the note); identity must match exactly, moving values within a small tolerance."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not installed")
    out = subprocess.run(
        [smi, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    backend = real_harness.backend
    devices = {d.uuid: d for d in backend.devices()}
    backend.sample()
    samples = {s.uuid: s for s in backend.sample()}
    for line in out.strip().splitlines():
        uuid, name, driver, total, temp, power, mem_clock = (cell.strip() for cell in line.split(","))
        device, sample = devices[uuid], samples[uuid]
        print(f"{uuid}: ours {sample} | nvidia-smi {line}")
        assert (device.name, backend.driver_version()) == (name, driver)
        assert abs(device.memory_mib - int(float(total))) <= 1
        assert abs(sample.temperature_c - float(temp)) <= 5
        if power not in ("[N/A]", "N/A"):
            assert abs(sample.power_w - float(power)) <= max(25.0, 0.2 * float(power))
        assert abs(sample.mem_clock_mhz - int(float(mem_clock))) <= 0.1 * int(float(mem_clock)) + 1
