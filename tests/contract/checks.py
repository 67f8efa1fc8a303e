"""The GPU backend contract: one set of behavioural checks that every backend must pass.

Each check takes a ``Harness``: the backend under test, what it should report (``expected``; None on
real hardware, where only invariants are checked) and, where the backend allows it, ways to inject
faults. The same functions run in-process against the simulated backend, in a subprocess against
the NVML backend over the fake library (``worker``), and against real NVML (``tests/gpu``). They use
plain asserts and no pytest, so they run the same way in all three places.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuLostError, NotSupportedError
from gpu_operator.gpu.types import Device, HealthEvent, Link, LinkType, MigProfile

UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
DRIVER = re.compile(r"^\d+\.\d+(\.\d+)?$")
FAMILIES = {"kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell", "rubin"}
PROMPT_S = 1.0  # an injected event must reach a waiting thread within this


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What a backend of a known node must report."""

    driver_version: str
    cuda_driver_version: tuple[int, int]
    devices: Sequence[Device]
    links: Sequence[Link]


class Harness(Protocol):
    backend: GpuBackend
    expected: Expected | None

    def inject_xid(self, index: int, xid: int, *, gi_id: int | None = None) -> None: ...
    def lose_gpu(self, index: int) -> None: ...
    def recover_gpu(self, index: int) -> None: ...
    def reset_gpu(self, index: int) -> None: ...
    def set_load(self, index: int, pct: float) -> None: ...


@dataclass(frozen=True)
class Check:
    run: Callable[[Harness], None]
    needs_faults: bool = False  # injects faults: only where the harness can
    changes_gpus: bool = False  # changes MIG state: on real GPUs only when explicitly allowed


def check_driver_version(h: Harness) -> None:
    version = h.backend.driver_version()
    major, minor = h.backend.cuda_driver_version()
    assert DRIVER.match(version), version
    assert major >= 10, (major, minor)
    assert 0 <= minor < 100, (major, minor)
    if h.expected:
        assert version == h.expected.driver_version
        assert (major, minor) == h.expected.cuda_driver_version


def check_devices(h: Harness) -> None:
    devices = list(h.backend.devices())
    assert [d.index for d in devices] == list(range(len(devices)))
    assert len({d.uuid for d in devices}) == len(devices), "UUIDs must be unique"
    assert len({d.pci_bus_id for d in devices}) == len(devices), "PCI addresses must be unique"
    for d in devices:
        assert UUID.match(d.uuid), d.uuid
        assert BUS_ID.match(d.pci_bus_id), d.pci_bus_id
        assert d.name, d
        assert d.memory_mib > 1024, d
        assert d.compute_capability[0] >= 3, d.compute_capability
        assert d.architecture in FAMILIES, d.architecture
        assert d.mig_capable or not (d.mig_enabled or d.mig_profiles), d
        assert len({p.name for p in d.mig_profiles}) == len(d.mig_profiles), "MIG profile names must be unique"
    if h.expected:
        assert devices == list(h.expected.devices)


def check_topology(h: Harness) -> None:
    count = len(h.backend.devices())
    links = list(h.backend.topology())
    pairs = [(link.a, link.b) for link in links]
    assert all(a < b for a, b in pairs), "each pair once, lower index first"
    assert sorted(pairs) == [(a, b) for a in range(count) for b in range(a + 1, count)], "every pair, once"
    for link in links:
        assert (link.nvlinks > 0) == (link.type is LinkType.NVLINK), link
    if h.expected:
        assert sorted(links, key=lambda x: (x.a, x.b)) == list(h.expected.links)


def mig_layouts(profiles: Sequence[MigProfile]) -> tuple[list[str], list[tuple[list[str], str]]]:
    """A layout that fits, and layouts that must be refused with a message containing the given text."""
    by_slices: dict[int, list[MigProfile]] = {}
    for p in profiles:
        by_slices.setdefault(p.slices, []).append(p)
    one = min(by_slices[1], key=lambda p: (p.memory_mib, p.nvml_profile))  # the plain 1g profile
    big_one = max(by_slices[1], key=lambda p: p.memory_mib)  # 1g with two memory slices
    good = [by_slices[3][0].name, by_slices[2][0].name, one.name, one.name]
    bad = [
        (["9g.999gb"], "unknown MIG profile"),
        ([one.name] * (one.max_count + 1), f"at most {one.max_count}"),
        ([by_slices[4][0].name, by_slices[3][0].name, one.name], "compute slices"),
        ([big_one.name] * big_one.max_count + [one.name], "MiB of MIG memory"),
    ]
    return good, bad


def check_mig(h: Harness) -> None:
    backend = h.backend
    capable = [d for d in backend.devices() if d.mig_capable]
    if not capable:
        for d in backend.devices():
            assert list(backend.mig_devices(d.index)) == []
            _raises(NotSupportedError, partial(backend.set_mig_mode, d.index, enabled=True))
            _raises(NotSupportedError, partial(backend.create_mig_devices, d.index, profiles=[]))
        return
    index = capable[-1].index
    if not capable[-1].mig_enabled:
        _raises(GpuError, lambda: backend.create_mig_devices(index, profiles=[]), "disabled")
    if backend.set_mig_mode(index, enabled=True):
        assert backend.devices()[index].mig_pending
        h.reset_gpu(index)
    device = backend.devices()[index]
    assert device.mig_enabled
    assert not device.mig_pending
    good, bad = mig_layouts(device.mig_profiles)
    memory = {p.name: p.memory_mib for p in device.mig_profiles}
    created = list(backend.create_mig_devices(index, profiles=good))
    assert Counter(m.profile for m in created) == Counter(good)
    assert [m.index for m in created] == list(range(len(good)))
    assert len({m.uuid for m in created}) == len(good)
    assert all(MIG_UUID.match(m.uuid) for m in created)
    assert len({m.gi_id for m in created}) == len(good)
    assert all(m.parent_index == index and m.memory_mib == memory[m.profile] for m in created)
    assert list(backend.mig_devices(index)) == created
    for layout, message in bad:
        _raises(GpuError, partial(backend.create_mig_devices, index, profiles=layout), message)
    assert list(backend.mig_devices(index)) == created, "a refused layout leaves the old one in place"
    assert list(backend.create_mig_devices(index, profiles=[])) == []
    if backend.set_mig_mode(index, enabled=False):
        h.reset_gpu(index)
    assert not backend.devices()[index].mig_enabled
    assert list(backend.mig_devices(index)) == []


def check_xid_event(h: Harness) -> None:
    backend = h.backend
    uuid = backend.devices()[0].uuid
    assert list(backend.wait_health_events(timeout=0)) == []
    got: list[HealthEvent] = []
    waiter = threading.Thread(target=lambda: got.extend(backend.wait_health_events(timeout=10)))
    waiter.start()
    start = time.monotonic()
    h.inject_xid(0, 79)
    waiter.join(timeout=10)
    elapsed = time.monotonic() - start
    assert got == [HealthEvent(uuid=uuid, xid=79, message="XID 79")], got
    assert elapsed < PROMPT_S, f"the waiting thread woke after {elapsed:.2f} s"
    assert {s.uuid: s.last_xid for s in backend.sample()}[uuid] == 79


def check_lost_gpu(h: Harness) -> None:
    backend = h.backend
    devices = backend.devices()
    index = len(devices) - 1
    uuid = devices[index].uuid
    backend.wait_health_events(timeout=0)
    h.lose_gpu(index)
    events = backend.wait_health_events(timeout=5)
    assert [(e.uuid, e.lost) for e in events] == [(uuid, True)], events
    _raises(GpuLostError, backend.devices, f"GPU {index}")
    _raises(GpuLostError, lambda: backend.mig_devices(index), f"GPU {index}")
    assert uuid not in {s.uuid for s in backend.sample()}
    assert len(backend.sample()) == len(devices) - 1
    h.recover_gpu(index)
    events = backend.wait_health_events(timeout=5)
    assert [(e.uuid, e.recovered) for e in events] == [(uuid, True)], events
    assert backend.devices() == devices


def check_metrics(h: Harness) -> None:
    backend = h.backend
    devices = backend.devices()
    h.set_load(0, 50)
    first = {s.uuid: s for s in backend.sample()}
    second = {s.uuid: s for s in backend.sample()}
    assert set(first) == {d.uuid for d in devices}
    for d in devices:
        s = first[d.uuid]
        for pct in (s.gpu_util_pct, s.mem_copy_util_pct, s.enc_util_pct, s.dec_util_pct):
            assert 0 <= pct <= 100, s
        total = s.fb_used_mib + s.fb_free_mib + s.fb_reserved_mib
        assert abs(total - d.memory_mib) <= max(2, d.memory_mib // 100), (total, d.memory_mib)
        assert 0 < s.temperature_c < 110, s
        assert s.memory_temperature_c is None or 0 <= s.memory_temperature_c < 120, s
        assert 0 <= s.power_w < 2000, s
        assert s.total_energy_mj >= 0, s
        assert s.sm_clock_mhz > 0, s
        assert s.mem_clock_mhz > 0, s
        assert min(s.pcie_replay_count, s.ecc_sbe_volatile, s.ecc_dbe_volatile, s.nvlink_bandwidth_total or 0) >= 0
        assert second[d.uuid].total_energy_mj >= s.total_energy_mj, "energy is a counter"
    if h.expected:
        busy = first[devices[0].uuid]
        assert busy.gpu_util_pct > 0, busy
        assert busy.fb_used_mib > 0, busy


def check_close(h: Harness) -> None:
    backend = h.backend
    backend.devices()
    backend.close()
    backend.close()
    _raises(GpuError, backend.devices, "closed")
    _raises(GpuError, lambda: backend.wait_health_events(timeout=0), "closed")


def _raises(kind: type[Exception], fn: Callable[[], object], text: str = "") -> None:
    """pytest.raises for code that also runs outside pytest (the worker process)."""
    message = None
    try:
        fn()
    except kind as exc:
        message = str(exc)
    assert message is not None, f"expected {kind.__name__} ({text!r})"
    assert text in message, f"{kind.__name__} without {text!r}: {message}"


CHECKS: dict[str, Check] = {
    "driver_version": Check(check_driver_version),
    "devices": Check(check_devices),
    "topology": Check(check_topology),
    "mig": Check(check_mig, changes_gpus=True),
    "xid_event": Check(check_xid_event, needs_faults=True),
    "lost_gpu": Check(check_lost_gpu, needs_faults=True),
    "metrics": Check(check_metrics),
    "close": Check(check_close),
}

from tests.contract import checks_readings  # noqa: E402 - registers into CHECKS, which it imports

CHECKS |= {
    "optional_readings": Check(checks_readings.check_optional_readings),
    "gpm_apart": Check(checks_readings.check_gpm_compares_samples_apart),
    "xid_in_reading": Check(checks_readings.check_xid_in_reading, needs_faults=True),
}

from tests.contract import checks_health  # noqa: E402 - registers into CHECKS, which it imports

CHECKS["reset_recovers"] = Check(checks_health.check_reset_recovers, needs_faults=True, changes_gpus=True)

from tests.contract import checks_identity  # noqa: E402 - plain functions over the Harness above

CHECKS["identity"] = Check(checks_identity.check_identity)
CHECKS["mig_attributes"] = Check(checks_identity.check_created_mig_attributes, changes_gpus=True)

from tests.contract import checks_mig  # noqa: E402 - plain functions over the Harness above

CHECKS["mig_compute_instances"] = Check(checks_mig.check_mig_compute_instances, changes_gpus=True)
