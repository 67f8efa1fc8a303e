"""Harnesses that put a backend under the contract checks, with the fault controls each one allows.

``SimHarness``: the simulated backend, in-process. ``FakeNvmlHarness``: the NVML backend over the
fake ``libnvidia-ml.so.1`` (only inside a process started with that library on LD_LIBRARY_PATH; see
``worker``), with faults injected through the fake's extra exported functions. ``RealHarness``: real
NVML, no faults. ``expected`` comes from the catalog through a second simulated backend of the same
profile, seed and node name, which is also what the fake library's config is written from.
"""

from __future__ import annotations

import ctypes

from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.nvml import NvmlBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.contract.checks import Expected

SEED = 7
NODE = "contract-node"
_NO_INSTANCE = 0xFFFFFFFF


def expected(profile_name: str, *, seed: int = SEED, node_name: str = NODE) -> Expected:
    profile = node_profile(profile_name)
    reference = SimulatedBackend(profile=profile, seed=seed, node_name=node_name)
    try:
        return Expected(
            driver_version=profile.driver_version,
            cuda_driver_version=profile.cuda_driver_version,
            devices=list(reference.devices()),
            links=list(profile.links()),
        )
    finally:
        reference.close()


class SimHarness:
    def __init__(self, profile_name: str) -> None:
        self.sim = SimulatedBackend(profile=node_profile(profile_name), seed=SEED, node_name=NODE)
        self.backend: GpuBackend = self.sim
        self.expected: Expected | None = expected(profile_name)

    def inject_xid(self, index: int, xid: int, *, gi_id: int | None = None) -> None:
        self.sim.inject_xid(index, xid, gi_id=gi_id)

    def lose_gpu(self, index: int) -> None:
        self.sim.lose_gpu(index)

    def recover_gpu(self, index: int) -> None:
        self.sim.recover_gpu(index)

    def reset_gpu(self, index: int) -> None:
        self.sim.reset_gpu(index)

    def set_load(self, index: int, pct: float) -> None:
        self.sim.set_load(index, pct)


class FakeNvmlHarness:
    def __init__(self, profile_name: str) -> None:
        self.backend: GpuBackend = NvmlBackend()
        self.expected: Expected | None = expected(profile_name)
        # The library pynvml loaded (same soname, so dlopen returns the same instance).
        self._fake = ctypes.CDLL("libnvidia-ml.so.1")
        self._fake.fakeNvmlInjectXid.argtypes = [ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_uint]

    def inject_xid(self, index: int, xid: int, *, gi_id: int | None = None) -> None:
        gi = _NO_INSTANCE if gi_id is None else gi_id
        ci = _NO_INSTANCE if gi_id is None else 0
        assert self._fake.fakeNvmlInjectXid(index, xid, gi, ci) == 0

    def lose_gpu(self, index: int) -> None:
        assert self._fake.fakeNvmlSetLost(index, 1) == 0

    def recover_gpu(self, index: int) -> None:
        assert self._fake.fakeNvmlSetLost(index, 0) == 0

    def reset_gpu(self, index: int) -> None:
        assert self._fake.fakeNvmlResetGpu(index) == 0

    def set_load(self, index: int, pct: float) -> None:
        assert self._fake.fakeNvmlSetUtilization(index, round(pct)) == 0


class RealHarness:
    """Real NVML: no expectations beyond the invariants, no faults, no GPU resets."""

    def __init__(self) -> None:
        self.backend: GpuBackend = NvmlBackend()
        self.expected: Expected | None = None

    def inject_xid(self, index: int, xid: int, *, gi_id: int | None = None) -> None:
        raise NotImplementedError("faults cannot be injected into real GPUs")

    def lose_gpu(self, index: int) -> None:
        raise NotImplementedError("faults cannot be injected into real GPUs")

    def recover_gpu(self, index: int) -> None:
        raise NotImplementedError("faults cannot be injected into real GPUs")

    def reset_gpu(self, index: int) -> None:
        raise AssertionError(f"GPU {index} needs a reset (nvidia-smi -r) for its MIG mode change; do it by hand")

    def set_load(self, index: int, pct: float) -> None:
        """Real load comes from real work; the metric checks only assert ranges here."""
