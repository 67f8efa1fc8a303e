"""MIG reconfiguration against the simulated backend with an in-memory Node and cluster: all-disabled ->
all-1g.5gb -> all-disabled with pending -> success, the geometry on the backend, the GPU clients paused
meanwhile and restored; a forced timeout ends in ``failed`` with the labels restored and the reason
reported; a layout that does not fit fails before anything is paused; a reboot; the program's loop
recovers labels a crashed run left paused."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections import Counter
from pathlib import Path

import pytest

from gpu_operator.agents.migmanager import program
from gpu_operator.agents.migmanager.config import MigConfigError, load
from gpu_operator.agents.migmanager.defaults import default_configs
from gpu_operator.agents.migmanager.reconfigure import (
    REASON_ANNOTATION,
    STATE_LABEL,
    Options,
    Reconfigure,
)
from gpu_operator.agents.shared.cluster import PodInfo
from gpu_operator.api.windows import WindowSchedule
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_drivermanager_cluster import FakeClock, FakeCluster, RecordingNode

DP = "nvidia.com/gpu.deploy.device-plugin"
GFD = "nvidia.com/gpu.deploy.gpu-feature-discovery"
DCGM = "nvidia.com/gpu.deploy.dcgm"


class Harness:
    def __init__(self, *, profile: str = "a100-mig", timeout: float = 300.0) -> None:
        self.backend = SimulatedBackend(profile=NODE_PROFILES[profile])
        self.node = RecordingNode(values={DP: "true", GFD: "true", DCGM: "false"})
        self.cluster = FakeCluster(
            node_labels=self.node,
            pods=[
                PodInfo(namespace="gpu-operator", name="dp-x", labels={"app": "nvidia-device-plugin-daemonset"}),
                PodInfo(namespace="gpu-operator", name="gfd-x", labels={"app": "gpu-feature-discovery"}),
                PodInfo(namespace="gpu-operator", name="val-x", labels={"app": "nvidia-operator-validator"}),
            ],
            daemonset_apps={"nvidia-device-plugin-daemonset": DP, "gpu-feature-discovery": GFD},
        )
        self.clock = FakeClock()
        self.work = Reconfigure(
            node=self.node,
            cluster=self.cluster,
            backend=self.backend,
            reset=program.BackendReset(backend=self.backend, reset_gpu=self.backend.reset_gpu),
            options=Options(wait_timeout=timeout, poll_interval=1.0),
            sleep=self.clock.sleep,
            clock=self.clock,
        )

    def run(self, name: str) -> str:
        return asyncio.run(self.work.run(name=name, configs=default_configs())).state

    def geometry(self) -> list[Counter[str]]:
        return [Counter(m.profile for m in self.backend.mig_devices(d.index)) for d in self.backend.devices()]


def test_switch_to_all_1g_and_back() -> None:
    h = Harness()
    assert h.run("all-disabled") == "success"
    assert h.node.history == [{STATE_LABEL: "success"}], "already applied: nothing paused"

    assert h.run("all-1g.5gb") == "success"
    assert [d.mig_enabled for d in h.backend.devices()] == [True, True]
    assert h.geometry() == [Counter({"1g.5gb": 7})] * 2
    assert h.node.values_of(STATE_LABEL) == ["success", "pending", "success"]
    assert h.node.values_of(DP) == ["paused-for-mig-change", "true"]
    assert h.node.values_of(DCGM) == [], "an opted-out operand is never touched"
    assert h.node.values[GFD] == "true"
    assert "val-x" in h.cluster.deletions, "the validator re-checks the new geometry"

    assert h.run("all-disabled") == "success"
    assert [d.mig_enabled for d in h.backend.devices()] == [False, False]
    assert h.geometry() == [Counter()] * 2
    assert h.node.values_of(STATE_LABEL)[-2:] == ["pending", "success"]


def test_forced_timeout_fails_and_restores_the_labels() -> None:
    h = Harness(timeout=30)
    h.cluster.stuck.add("dp-x")  # a device-plugin pod that never terminates
    assert h.run("all-1g.5gb") == "failed"
    assert h.node.values_of(STATE_LABEL) == ["pending", "failed"]
    assert h.node.values[DP] == "true"
    assert h.node.values[GFD] == "true"
    reason = h.cluster.annotations[REASON_ANNOTATION]
    assert "timed out after 30 s waiting for GPU clients to stop: gpu-operator/dp-x" in reason
    assert ("MigConfigFailed", reason) in h.cluster.events
    assert [d.mig_enabled for d in h.backend.devices()] == [False, False], "the GPUs were not touched"
    assert h.clock.now == 30  # the wait was bounded by the timeout, on the fake clock


def test_a_layout_that_does_not_fit_fails_before_pausing() -> None:
    h = Harness()
    configs = load(
        "version: v1\nmig-configs: {big: [{devices: all, mig-enabled: true, mig-devices: {7g.40gb: 2}}]}", source="x"
    )
    assert asyncio.run(h.work.run(name="big", configs=configs)).state == "failed"
    assert h.node.values_of(STATE_LABEL) == ["failed"]
    assert h.node.values_of(DP) == [], "nothing was paused"
    assert "2 x 7g.40gb requested, at most 1 fit" in h.cluster.annotations[REASON_ANNOTATION]


def test_a_config_that_selects_no_gpu_here_is_success() -> None:
    h = Harness(profile="dgx-h100")
    assert h.run("all-1g.5gb") == "success"  # A100-40GB entries only: nothing to do on an H100 node
    assert h.node.history == [{STATE_LABEL: "success"}]


def test_unknown_config_fails_with_the_reason() -> None:
    h = Harness()
    assert h.run("all-3g.7tb") == "failed"
    assert h.node.values_of(STATE_LABEL) == ["failed"]
    assert "no MIG config named 'all-3g.7tb'" in h.cluster.annotations[REASON_ANNOTATION]
    assert h.node.values_of(DP) == []


def test_mode_change_that_needs_a_reboot() -> None:
    class NoReset(program.BackendReset):
        def reset(self, index: int) -> None:
            pass  # a reset that does not apply the pending mode: only a reboot will

    h = Harness()
    h.work.reset = NoReset(backend=h.backend, reset_gpu=h.backend.reset_gpu)
    assert h.run("all-1g.5gb") == "failed"
    assert "still needs a reboot" in h.cluster.annotations[REASON_ANNOTATION]
    assert h.node.values[DP] == "true"

    h.work.options = Options(wait_timeout=300, with_reboot=True)
    h.node.history.clear()
    assert h.run("all-1g.5gb") == "success"
    assert h.node.values_of(STATE_LABEL) == ["pending", "rebooting", "success"]
    assert h.geometry() == [Counter({"1g.5gb": 7})] * 2


def test_program_restores_labels_left_paused_and_applies_the_label(tmp_path: Path) -> None:
    backend = SimulatedBackend(profile=NODE_PROFILES["a100-mig"])
    ctx = FakeContext(root=tmp_path, gpu=backend, env={"MIG_POLL_INTERVAL": "0"})
    assert ctx.node is not None
    ctx.node.values.update(
        {DP: "paused-for-mig-change", "nvidia.com/mig.config": "all-balanced", STATE_LABEL: "pending"}
    )
    ctx.stop_after = 2
    asyncio.run(program.main(ctx))
    assert ctx.node.values[DP] == "true"
    assert ctx.node.values[STATE_LABEL] == "success"
    expected = Counter({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert [Counter(m.profile for m in backend.mig_devices(i)) for i in (0, 1)] == [expected, expected]


def test_program_reports_a_bad_config_file(tmp_path: Path) -> None:
    backend = SimulatedBackend(profile=NODE_PROFILES["a100-mig"])
    ctx = FakeContext(root=tmp_path, gpu=backend, env={"CONFIG_FILE": "/mig/config.yaml"})
    assert ctx.node is not None
    ctx.path("/mig/config.yaml").parent.mkdir(parents=True)
    ctx.path("/mig/config.yaml").write_text("version: v9\n")
    ctx.node.values["nvidia.com/mig.config"] = "all-disabled"
    ctx.stop_after = 1
    asyncio.run(program.main(ctx))
    assert ctx.node.values[STATE_LABEL] == "failed"


def test_a_change_waits_for_a_maintenance_window_and_goes_once_one_is_open() -> None:
    h = Harness()
    nightly = WindowSchedule.parse(zone="UTC", windows=[("0 2 * * *", "2h")])
    now = [dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC).timestamp()]  # Friday noon: closed
    h.work.options = dataclasses.replace(h.work.options, windows=nightly)
    h.work.wall = lambda: now[0]
    assert h.run("all-disabled") == "success"  # already applied: nothing to wait for
    assert h.run("all-1g.5gb") == "pending"
    assert h.run("all-1g.5gb") == "pending"  # the next poll: still closed, nothing written again
    assert [d.mig_enabled for d in h.backend.devices()] == [False, False]  # nothing touched
    assert h.node.values_of(DP) == [], "the GPU clients were not paused"
    assert h.node.values_of(STATE_LABEL) == ["success", "pending"]
    assert h.cluster.annotations[REASON_ANNOTATION] == (
        "nvidia.com/mig.config=all-1g.5gb: waiting for a maintenance window; the next opens 2026-12-05 02:00 UTC"
    )
    now[0] = dt.datetime(2026, 12, 5, 2, 0, tzinfo=dt.UTC).timestamp()
    assert h.run("all-1g.5gb") == "success"
    assert h.geometry() == [Counter({"1g.5gb": 7})] * 2


def test_the_windows_come_from_the_rendered_environment(tmp_path: Path) -> None:
    text = '{"timeZone":"Europe/Berlin","windows":[{"schedule":"0 2 * * sat","duration":"4h"}]}'
    gpu = SimulatedBackend(profile=NODE_PROFILES["a100-mig"])
    windows = program.maintenance_windows(FakeContext(root=tmp_path, gpu=gpu, env={"MIG_MAINTENANCE_WINDOWS": text}))
    assert windows is not None
    assert windows.zone_name == "Europe/Berlin"
    assert program.maintenance_windows(FakeContext(root=tmp_path, gpu=gpu, env={})) is None
    bad = FakeContext(root=tmp_path, gpu=gpu, env={"MIG_MAINTENANCE_WINDOWS": '{"windows":[{"schedule":"0 2 * * *"}]}'})
    with pytest.raises(MigConfigError, match="MIG_MAINTENANCE_WINDOWS"):
        program.maintenance_windows(bad)
