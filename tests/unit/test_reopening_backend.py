"""The auto backend keeps asking for NVML while the driver is missing, at most every retry interval."""

from __future__ import annotations

import pytest

from gpu_operator.gpu import GpuBackend, GpuNotFoundError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.reopening import ReopeningBackend
from gpu_operator.gpu.simulated import SimulatedBackend


class Opener:
    def __init__(self) -> None:
        self.calls = 0
        self.driver_loaded = False

    def __call__(self) -> GpuBackend:
        self.calls += 1
        if not self.driver_loaded:
            raise GpuNotFoundError("nvmlInit: Driver Not Loaded")
        return SimulatedBackend(profile=NODE_PROFILES["pcie-l4"])


def test_null_until_the_driver_loads_then_the_real_backend_for_good() -> None:
    now = [100.0]
    opener = Opener()
    backend = ReopeningBackend(open_nvml=opener, retry_seconds=5.0, clock=lambda: now[0])
    assert (backend.name, opener.calls) == ("null", 1)
    assert backend.devices() == []
    with pytest.raises(GpuNotFoundError, match="Driver Not Loaded"):
        backend.driver_version()
    assert opener.calls == 1  # within the retry interval: not asked again
    opener.driver_loaded = True
    now[0] += 5.0
    assert len(backend.devices()) == 4  # the pcie-l4 profile: four L4s
    assert backend.name == "simulated"
    now[0] += 100.0
    backend.devices()
    assert opener.calls == 2  # opened once, kept
    backend.close()
