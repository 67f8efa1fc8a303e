"""The plugin's health policy: which XIDs count, when a device comes back, what gets counted and reported.

Pure: a fake clock stands in for time, so the quiet period is tested without sleeping.
"""

from __future__ import annotations

import asyncio

import pytest

from gpu_operator.agents.deviceplugin.health import HealthBook, RecoveryPolicy, Transition, XidPolicy
from gpu_operator.agents.deviceplugin.healthreport import HealthReport, event_for
from gpu_operator.gpu import recovery
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import HealthEvent

GPU = "GPU-00000000-0000-0000-0000-000000000001"
MIG = "MIG-00000000-0000-0000-0000-000000000001"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _book(env: dict[str, str] | None = None, clock: Clock | None = None) -> HealthBook:
    env = env or {}
    return HealthBook(policy=XidPolicy.from_env(env), recovery=RecoveryPolicy.from_env(env), clock=clock or Clock())


def _xid(xid: int, uuid: str = GPU) -> HealthEvent:
    return HealthEvent(uuid=uuid, xid=xid, message=f"XID {xid}")


RESET = HealthEvent(uuid=GPU, recovered=True, reset=True, message="GPU reset cleared XID 48")


@pytest.mark.parametrize(
    ("env", "acts", "ignores"),
    [
        ({}, [48, 79, 94], [13, 31, 43, 45, 68, 109]),
        ({"DP_DISABLE_HEALTHCHECKS": "48, 74"}, [79], [48, 74, 13]),
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, [], [48, 79]),
        ({"DP_DISABLE_HEALTHCHECKS": "xids", "DP_ENABLE_HEALTHCHECKS": "79"}, [79], [48]),
        ({"DP_ENABLE_HEALTHCHECKS": "13"}, [13, 48], [31]),
    ],
)
def test_xid_policy_keeps_upstreams_variables(env: dict[str, str], acts: list[int], ignores: list[int]) -> None:
    policy = XidPolicy.from_env(env)
    assert [x for x in acts if policy.acts_on(x)] == acts
    assert [x for x in ignores if policy.acts_on(x)] == []


def test_recovery_policy_from_env() -> None:
    assert RecoveryPolicy.from_env({}) == RecoveryPolicy(on_reset=True, quiet_seconds=0.0)
    env = {"DP_RECOVER_ON_RESET": "false", "DP_RECOVER_QUIET_SECONDS": "300"}
    assert RecoveryPolicy.from_env(env) == RecoveryPolicy(on_reset=False, quiet_seconds=300.0)
    for bad, name in (("maybe", "DP_RECOVER_ON_RESET"),):
        with pytest.raises(ValueError, match=name):
            RecoveryPolicy.from_env({name: bad})
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(ValueError, match="DP_RECOVER_QUIET_SECONDS"):
            RecoveryPolicy.from_env({"DP_RECOVER_QUIET_SECONDS": bad})


def test_an_xid_then_a_reset_brings_the_device_back() -> None:
    book = _book()
    assert book.apply([_xid(48)])
    assert not book.healthy(GPU)
    assert book.reason(GPU) == "XID 48"
    assert book.apply([RESET])
    assert book.healthy(GPU)
    assert book.version == 2
    assert book.take_transitions() == [
        Transition(uuid=GPU, healthy=False, cause="xid", xid=48, message="XID 48"),
        Transition(uuid=GPU, healthy=True, cause="reset", xid=48, message="GPU reset cleared XID 48"),
    ]
    assert book.take_transitions() == []


def test_resets_are_ignored_when_the_policy_says_so() -> None:
    book = _book({"DP_RECOVER_ON_RESET": "false"})
    book.apply([_xid(48)])
    assert not book.apply([RESET])
    assert not book.healthy(GPU)


def test_the_quiet_period_brings_the_device_back_and_a_new_xid_restarts_it() -> None:
    clock = Clock()
    book = _book({"DP_RECOVER_QUIET_SECONDS": "60"}, clock)
    book.apply([_xid(48)])
    clock.now += 59
    assert not book.expire()
    book.apply([_xid(48)])  # a new XID: the period starts again
    assert book.take_transitions() == [Transition(uuid=GPU, healthy=False, cause="xid", xid=48, message="XID 48")]
    clock.now += 59
    assert not book.expire()
    assert not book.healthy(GPU)
    clock.now += 1
    assert book.expire()
    assert book.healthy(GPU)
    assert book.take_transitions() == [
        Transition(uuid=GPU, healthy=True, cause="quiet", xid=48, message="no XID for 60 s")
    ]


def test_without_a_quiet_period_time_never_brings_a_device_back() -> None:
    clock = Clock()
    book = _book({}, clock)
    book.apply([_xid(79)])
    clock.now += 10**9
    assert not book.expire()
    assert not book.healthy(GPU)


def test_ignored_xids_neither_mark_nor_extend() -> None:
    clock = Clock()
    book = _book({"DP_RECOVER_QUIET_SECONDS": "10"}, clock)
    assert not book.apply([_xid(13)])
    book.apply([_xid(48)])
    clock.now += 9
    book.apply([_xid(13)])  # an application error is not a new fault of the device
    clock.now += 1
    assert book.expire()


def test_a_lost_gpu_comes_back_when_it_answers_not_by_time_nor_by_an_xid_period() -> None:
    clock = Clock()
    book = _book({"DP_RECOVER_QUIET_SECONDS": "5"}, clock)
    book.apply([HealthEvent(uuid=GPU, lost=True), _xid(79)])
    assert book.reason(GPU) == "GPU lost"
    clock.now += 100
    assert not book.expire()
    assert book.apply([HealthEvent(uuid=GPU, recovered=True, message="GPU answers again")])
    assert [(t.healthy, t.cause) for t in book.take_transitions()] == [(False, "lost"), (True, "answers")]


def test_mig_devices_follow_their_gpu() -> None:
    book = HealthBook(policy=XidPolicy(), mig_parents={MIG: (GPU, 1)})
    book.apply([_xid(48)])
    assert not book.healthy(MIG)
    assert book.unhealthy_count() == 2
    book.apply([RESET])
    assert book.healthy(MIG)
    assert book.unhealthy_count() == 0


def test_the_report_counts_renders_and_sends_events() -> None:
    book = _book()
    sent: list[tuple[str, str, bool]] = []

    class Sink:
        async def event(self, *, reason: str, message: str, warning: bool = False) -> None:
            sent.append((reason, message, warning))

    report = HealthReport(unhealthy_now=book.unhealthy_count, events=Sink(), name="dp")

    async def run() -> None:
        book.apply([_xid(48)])
        report.record(book.take_transitions())
        assert "gpu_operator_device_plugin_unhealthy_devices 1" in report.render()
        book.apply([RESET])
        report.record(book.take_transitions())
        await report.flush()

    asyncio.run(run())
    text = report.render()
    assert 'gpu_operator_device_plugin_unhealthy_transitions_total{cause="xid",xid="48"} 1' in text
    assert 'gpu_operator_device_plugin_recoveries_total{cause="reset"} 1' in text
    assert "gpu_operator_device_plugin_unhealthy_devices 0" in text
    assert [(r, w) for r, _, w in sent] == [("GpuUnhealthy", True), ("GpuRecovered", False)]
    assert all(GPU in m and "XID 48" in m for _, m, _ in sent)


def test_event_text_names_the_gpu_and_the_xid() -> None:
    reason, message, warning = event_for(Transition(uuid=GPU, healthy=False, cause="xid", xid=74, gi_id=2))
    assert (reason, warning) == ("GpuUnhealthy", True)
    assert message.startswith(f"{GPU} (GPU instance 2) unhealthy after XID 74")


def test_the_simulated_gpu_asks_for_a_reset_and_a_reset_answers_it() -> None:
    sim = SimulatedBackend(profile=node_profile("pcie-l4"), node_name="n")
    try:
        uuid = sim.devices()[0].uuid
        sim.inject_xid(0, 13)  # an application error asks for nothing: a reset reports nothing
        assert sim.recovery_action(0) == recovery.NONE
        sim.reset_gpu(0)
        assert [e.xid for e in sim.wait_health_events(timeout=0)] == [13]
        sim.inject_xid(0, 48)
        assert sim.recovery_action(0) == recovery.GPU_RESET
        sim.wait_health_events(timeout=0)
        sim.reset_gpu(0)
        assert sim.recovery_action(0) == recovery.NONE
        [event] = sim.wait_health_events(timeout=0)
        assert (event.uuid, event.recovered, event.reset) == (uuid, True, True)
        assert "XID 48" in event.message
    finally:
        sim.close()
