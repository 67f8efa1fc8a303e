"""The null backend: a machine without GPUs."""

from __future__ import annotations

import threading

import pytest

from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuNotFoundError
from gpu_operator.gpu.null import NullBackend


def test_no_gpu_is_an_ordinary_answer() -> None:
    backend = NullBackend()
    assert isinstance(backend, GpuBackend)
    assert backend.name == "null"
    assert (backend.devices(), backend.topology(), backend.sample()) == ([], [], [])
    assert backend.wait_health_events(timeout=0) == []
    for call in (backend.driver_version, backend.cuda_driver_version):
        with pytest.raises(GpuNotFoundError, match="no NVIDIA GPU or driver"):
            call()
    with pytest.raises(GpuNotFoundError, match="no GPU 0"):
        backend.mig_devices(0)
    with pytest.raises(GpuNotFoundError):
        backend.set_mig_mode(0, enabled=True)
    with pytest.raises(GpuNotFoundError):
        backend.create_mig_devices(0, profiles=["1g.5gb"])


def test_the_reason_is_kept() -> None:
    with pytest.raises(GpuNotFoundError, match="nvmlInit: Driver Not Loaded"):
        NullBackend(reason="nvmlInit: Driver Not Loaded").driver_version()


def test_close_wakes_a_waiter_and_is_idempotent() -> None:
    backend = NullBackend()
    outcome: list[str] = []

    def wait() -> None:
        try:
            backend.wait_health_events(timeout=30)
        except GpuError as exc:
            outcome.append(str(exc))

    waiter = threading.Thread(target=wait)
    waiter.start()
    backend.close()
    backend.close()
    waiter.join(timeout=5)
    assert outcome == ["null backend is closed"]
    with pytest.raises(GpuError, match="closed"):
        backend.devices()
