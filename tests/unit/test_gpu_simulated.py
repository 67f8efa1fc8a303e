"""The simulated backend beyond the shared contract: identity, time, load, faults, threads, footprint."""

from __future__ import annotations

import itertools
import threading
import tracemalloc
from collections.abc import Callable

import pytest

from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuLostError, GpuNotFoundError
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import HealthEvent


class Clock:
    """A hand-driven clock, so time-dependent metrics are tested without sleeping."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def sim(profile: str = "dgx-h100", **kw: object) -> SimulatedBackend:
    return SimulatedBackend(profile=node_profile(profile), **kw)  # type: ignore[arg-type]


def test_identity_is_a_function_of_seed_and_node_name() -> None:
    same = [sim(seed=1, node_name="n1").devices(), sim(seed=1, node_name="n1").devices()]
    assert same[0] == same[1]
    others = [sim(seed=2, node_name="n1").devices(), sim(seed=1, node_name="n2").devices()]
    uuids = {d.uuid for devices in [same[0], *others] for d in devices}
    assert len(uuids) == 24, "no two nodes share a GPU UUID"
    assert isinstance(sim(), GpuBackend)


def test_metrics_follow_load_and_time() -> None:
    clock = Clock()
    backend = sim(clock=clock)
    idle = backend.sample()[0]
    assert (idle.gpu_util_pct, idle.power_w, idle.sm_clock_mhz) == (0.0, 70.0, 345)
    backend.set_load(0, 80)
    readings = []
    for _ in range(4):
        clock.now += 15
        readings.append(backend.sample()[0])
    assert all(75 <= r.gpu_util_pct <= 85 for r in readings)
    assert len({r.gpu_util_pct for r in readings}) > 1, "utilisation moves with time"
    assert all(b.total_energy_mj - a.total_energy_mj >= 15 * 500 * 1000 for a, b in itertools.pairwise(readings))
    assert readings[-1].temperature_c > idle.temperature_c
    assert readings[-1].fb_used_mib > idle.fb_used_mib
    assert (readings[-1].nvlink_bandwidth_total or 0) > 0
    replay = sim(clock=clock)
    replay.set_load(0, 80)
    clock.now -= 45
    assert replay.sample()[0].gpu_util_pct == readings[0].gpu_util_pct, "same time, same value"


def test_load_must_be_a_percentage() -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        sim().set_load(0, 120)


def test_driver_version_changes_carry_the_cuda_version() -> None:
    backend = sim(driver_version="535.161.08")
    assert (backend.driver_version(), backend.cuda_driver_version()) == ("535.161.08", (12, 2))
    backend.set_driver_version("570.124.06")
    assert (backend.driver_version(), backend.cuda_driver_version()) == ("570.124.06", (12, 8))
    with pytest.raises(ValueError, match="not a driver version"):
        backend.set_driver_version("latest")


def test_an_unloaded_driver_fails_every_call_and_wakes_a_waiter() -> None:
    backend = sim()
    errors: list[Exception] = []

    def wait() -> None:
        try:
            backend.wait_health_events(timeout=30)
        except GpuNotFoundError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    backend.set_present(False)
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    assert len(errors) == 1
    calls: list[Callable[[], object]] = [
        backend.driver_version,
        backend.cuda_driver_version,
        backend.devices,
        backend.topology,
        backend.sample,
    ]
    calls += [lambda: backend.mig_devices(0), lambda: backend.set_mig_mode(0, enabled=True)]
    for call in calls:
        with pytest.raises(GpuNotFoundError, match="driver not loaded"):
            call()
    backend.set_present(True)
    assert len(backend.devices()) == 8


def test_a_node_without_gpus_looks_like_the_null_backend() -> None:
    backend = sim("cpu-only")
    assert (backend.devices(), backend.topology(), backend.sample()) == ([], [], [])
    assert backend.wait_health_events(timeout=0) == []
    with pytest.raises(GpuNotFoundError, match="has no GPU"):
        backend.driver_version()
    with pytest.raises(GpuError, match="no GPU 0: the node has 0"):
        backend.mig_devices(0)


def test_xids_ecc_and_mig_scoped_events() -> None:
    backend = sim("a100-mig")
    backend.inject_xid(1, 48)
    sample = backend.sample()[1]
    assert (sample.last_xid, sample.ecc_dbe_volatile) == (48, 1)
    with pytest.raises(GpuError, match="no MIG GPU instance 1"):
        backend.inject_xid(0, 31, gi_id=1)
    backend.set_mig_mode(0, enabled=True)
    backend.reset_gpu(0)
    mig = backend.create_mig_devices(0, profiles=["3g.20gb", "3g.20gb"])[1]
    backend.inject_xid(0, 31, gi_id=mig.gi_id)
    events = backend.wait_health_events(timeout=0)
    assert events[-1] == HealthEvent(uuid=backend.devices()[0].uuid, xid=31, gi_id=mig.gi_id, ci_id=0, message="XID 31")


def test_mig_mode_waits_for_a_reset_and_recreated_devices_are_new() -> None:
    backend = sim("a100-mig")
    assert backend.set_mig_mode(0, enabled=True) is True
    assert (backend.devices()[0].mig_enabled, backend.devices()[0].mig_pending) == (False, True)
    assert backend.set_mig_mode(0, enabled=False) is False, "asking for the current mode cancels the change"
    assert not backend.devices()[0].mig_pending
    backend.set_mig_mode(0, enabled=True)
    backend.reset_gpu(0)
    first = backend.create_mig_devices(0, profiles=["7g.40gb"])
    second = backend.create_mig_devices(0, profiles=["7g.40gb"])
    assert first[0].uuid != second[0].uuid
    backend.set_mig_mode(0, enabled=False)
    assert backend.mig_devices(0) == second, "MIG devices stay until the reset"
    backend.reset_gpu(0)
    assert backend.mig_devices(0) == []
    assert not backend.devices()[0].mig_enabled


def test_lost_gpus_and_bad_indices() -> None:
    backend = sim("pcie-l4")
    backend.lose_gpu(2)
    backend.lose_gpu(2)  # losing it again emits nothing new
    assert [e.lost for e in backend.wait_health_events(timeout=0)] == [True]
    with pytest.raises(GpuLostError, match="GPU 2"):
        backend.topology()
    with pytest.raises(GpuError, match="no GPU 9: the node has 4"):
        backend.lose_gpu(9)
    backend.recover_gpu(2)
    assert [e.recovered for e in backend.wait_health_events(timeout=0)] == [True]
    # Recovery is also how an XID fault clears, so it is reported even for a GPU that was not lost.
    backend.recover_gpu(2)
    assert [e.recovered for e in backend.wait_health_events(timeout=0)] == [True]


def test_faults_from_many_threads_reach_one_waiter() -> None:
    backend = sim()
    received: list[HealthEvent] = []

    def consume() -> None:
        while len(received) < 400:
            events = backend.wait_health_events(timeout=5)
            if not events:
                return  # nothing for 5 s: the count below shows what went missing
            received.extend(events)

    consumer = threading.Thread(target=consume)
    consumer.start()

    def produce(index: int) -> None:
        for _ in range(50):
            backend.inject_xid(index, 43)

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(8)]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
    consumer.join(timeout=10)
    assert len(received) == 400


def test_an_unread_event_queue_stays_bounded() -> None:
    backend = sim()
    for _ in range(3000):
        backend.inject_xid(0, 43)
    assert len(backend.wait_health_events(timeout=0)) == 1024


def test_a_thousand_nodes_are_cheap() -> None:
    profile = node_profile("dgx-h100")
    tracemalloc.start()
    nodes = [SimulatedBackend(profile=profile, seed=1, node_name=f"node-{i}") for i in range(1000)]
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert size < 4_000_000, f"{size / 1000:.0f} kB for 1000 idle nodes"
    assert len(nodes[999].devices()) == 8


def test_close_is_final() -> None:
    backend = sim()
    backend.close()
    with pytest.raises(GpuError, match="closed"):
        backend.sample()
