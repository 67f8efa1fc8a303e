"""Contract checks for the readings behind the exporter: optional readings and XIDs without a waiter.

Registered into ``checks.CHECKS``, so they run on the simulated backend, on NVML over the fake library
and, in the ``gpu`` tier, on real NVML. Where the harness knows the node (``expected``), every optional
reading must be there exactly when the GPU model can give it (``gpu.telemetry``); on real hardware the
values are checked for range, and a Hopper or later GPU must give GPM profiling metrics.
"""

from __future__ import annotations

import time

from gpu_operator.gpu.catalog import GPU_MODELS
from gpu_operator.gpu.telemetry import GPM_ARCHITECTURES, GPM_MIN_INTERVAL_S, telemetry_of
from gpu_operator.gpu.types import PROFILING_METRICS, Device, Sample
from tests.contract.checks import Harness

# Fixed, not GPM_MIN_INTERVAL_S: with that constant wrongly 0, the check must still see fresh samples compared.
_GPM_APART_S = 0.15


def _in_range(s: Sample) -> None:
    if s.memory_temperature_c is not None:
        assert 0 <= s.memory_temperature_c < 120, s
    for value in (s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s, s.nvlink_bandwidth_total, s.clock_event_reasons):
        assert value is None or value >= 0, s
    for value in (s.remapped_rows_correctable, s.remapped_rows_uncorrectable):
        assert value is None or value >= 0, s
    assert s.row_remap_failure in (None, 0, 1), s
    assert s.vgpu_license_status in (None, 0, 1), s
    assert set(s.profiling) <= set(PROFILING_METRICS), s.profiling
    assert all(0.0 <= v <= 1.0 for v in s.profiling.values()), s.profiling


def _as_modelled(s: Sample, device: Device) -> None:
    model = next(m for m in GPU_MODELS.values() if m.name == device.name)
    can = telemetry_of(model)
    assert (s.memory_temperature_c is not None) == can.memory_sensor, (device.name, s)
    assert (s.remapped_rows_correctable is not None) == can.row_remapping, (device.name, s)
    assert (s.row_remap_failure is not None) == can.row_remapping, (device.name, s)
    assert (s.nvlink_bandwidth_total is not None) == can.nvlink, (device.name, s)
    assert set(s.profiling) == (set(PROFILING_METRICS) if can.gpm else set()), (device.name, s.profiling)
    assert s.vgpu_license_status is None, "a bare-metal node holds no vGPU licence"
    assert s.pcie_tx_bytes_per_s is not None, s
    assert s.pcie_rx_bytes_per_s is not None, s
    assert s.clock_event_reasons is not None, s


def check_optional_readings(h: Harness) -> None:
    backend = h.backend
    devices = {d.uuid: d for d in backend.devices()}
    backend.sample()  # GPM metrics compare two GPM samples: the second reading has them
    time.sleep(GPM_MIN_INTERVAL_S)  # as far apart as the backend compares them (real time: real NVML)
    for s in backend.sample():
        device = devices[s.uuid]
        _in_range(s)
        if h.expected is not None:
            _as_modelled(s, device)
        elif device.architecture in GPM_ARCHITECTURES and not device.mig_enabled:
            assert set(s.profiling) == set(PROFILING_METRICS), (device.name, s.profiling)


def check_gpm_compares_samples_apart(h: Harness) -> None:
    """A reading sooner than the GPM interval after the last repeats its metrics, not two fresh samples'.

    Compared back to back, a real H200's GPM samples said its DRAM was 100 % busy at idle.
    """
    backend = h.backend
    backend.sample()
    time.sleep(_GPM_APART_S)
    compared = {s.uuid: s.profiling for s in backend.sample()}
    assert {s.uuid: s.profiling for s in backend.sample()} == compared


def check_xid_in_reading(h: Harness) -> None:
    """An XID shows in the next reading though nobody waits for events, and a waiter still gets it."""
    backend = h.backend
    uuid = backend.devices()[0].uuid
    backend.sample()  # registers for events where that is needed first (NVML)
    h.inject_xid(0, 94)
    assert {s.uuid: s.last_xid for s in backend.sample()}[uuid] == 94
    events = backend.wait_health_events(timeout=1.0)
    assert [(e.uuid, e.xid) for e in events if e.xid is not None] == [(uuid, 94)], events
