"""The driver manager's steps on a simulated node with an in-memory cluster: pre-installed detection, the
no-module fast exit, operand pause/restore (also on failure), the digest fast path, eviction that respects
a PodDisruptionBudget (with and without auto-drain), busy modules, and our cordon vs. an admin's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.drivermanager import manager
from gpu_operator.agents.drivermanager.manager import ManagerSettings, settings_from_env, uninstall_driver
from gpu_operator.agents.drivermanager.modules import UNLOAD_ORDER
from gpu_operator.agents.drivermanager.steps import CORDONED_ANNOTATION, STATE_FILE, DriverManagerError
from gpu_operator.agents.shared.cluster import PodInfo
from gpu_operator.gpu.backend import GpuNotFoundError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_drivermanager_cluster import FakeCluster, RecordingNode

DP = "nvidia.com/gpu.deploy.device-plugin"
TK = "nvidia.com/gpu.deploy.container-toolkit"
DRIVER = "nvidia.com/gpu.deploy.driver"


class Node:
    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.backend = SimulatedBackend(profile=NODE_PROFILES["pcie-l4"])
        self.labels = RecordingNode(
            values={DP: "true", TK: "true", DRIVER: "true", "nvidia.com/gpu.deploy.dcgm": "false"}
        )
        self.ctx = FakeContext(
            root=tmp_path, gpu=self.backend, env={"EVICTION_TIMEOUT_SECONDS": "20", **env}, node=self.labels
        )
        self.cluster = FakeCluster(
            node_labels=self.labels,
            pods=[
                PodInfo(
                    namespace="gpu-operator",
                    name="dp",
                    labels={"app": "nvidia-device-plugin-daemonset"},
                    owner_kind="DaemonSet",
                ),
                PodInfo(namespace="ml", name="train-0", gpu=True, owner_kind="StatefulSet"),
                PodInfo(namespace="ml", name="cpu-only", owner_kind="ReplicaSet"),
            ],
            daemonset_apps={"nvidia-device-plugin-daemonset": DP},
        )
        self.slept = 0.0

        async def sleep(seconds: float | None) -> bool:
            self.slept += seconds or 0.0
            await asyncio.sleep(0)
            return False

        self.ctx.sleep = sleep  # type: ignore[method-assign]

    def load_modules(self, *, busy: str | None = None) -> None:
        for module in ("nvidia", "nvidia_uvm", "nvidia_modeset"):
            path = self.ctx.host_path(f"/sys/module/{module}")
            path.mkdir(parents=True, exist_ok=True)
            (path / "refcnt").write_text("2\n" if module == busy else "0\n")

    def loaded(self) -> list[str]:
        return [m for m in UNLOAD_ORDER if self.ctx.host_path(f"/sys/module/{m}/refcnt").exists()]

    def run(self) -> str:
        settings = settings_from_env(self.ctx.env)
        clock = iter(range(0, 10_000))  # each look at the clock is one second later: timeouts end

        def tick() -> float:
            return float(next(clock))

        return asyncio.run(uninstall_driver(self.ctx, cluster=self.cluster, settings=settings, clock=tick))


def test_pre_installed_driver_is_labelled_and_the_container_fails(tmp_path: Path) -> None:
    node = Node(tmp_path, PREINSTALLED_WAIT_SECONDS="60")
    smi = node.ctx.host_path("/usr/bin/nvidia-smi")
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\n# driver_version=535.161.08\n")
    with pytest.raises(DriverManagerError, match=r"a driver \(535\.161\.08\) is installed on the host"):
        node.run()
    assert node.labels.values[DRIVER] == "pre-installed"
    assert node.slept == 60
    assert node.labels.values[DP] == "true", "nothing paused"


def test_no_module_loaded_cleans_up_and_restores(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.labels.values[DP] = "paused-for-driver-upgrade"  # left by a crashed run
    pid = node.ctx.path("/run/nvidia/nvidia-driver.pid")
    pid.parent.mkdir(parents=True)
    pid.write_text("42\n")
    assert node.run() == "no NVIDIA module loaded: nothing to uninstall"
    assert node.labels.values[DP] == "true"
    assert not pid.exists()


def test_a_driver_that_unloaded_itself_for_another_config_restarts_the_operands(tmp_path: Path) -> None:
    # The old driver container unloaded its modules on exit (nothing held them); its digest stays.
    node = Node(tmp_path, DRIVER_CONFIG_DIGEST="new")
    state = node.ctx.path(STATE_FILE)
    state.parent.mkdir(parents=True)
    state.write_text("old\n")
    assert node.run() == "no NVIDIA module loaded; the previous driver's operands restart on the new one"
    assert node.labels.values_of(DP) == ["paused-for-driver-upgrade", "true"]
    assert node.labels.values_of(TK) == ["paused-for-driver-upgrade", "true"]  # its CDI spec is rebuilt
    assert node.cluster.evictions == []  # no module, so nothing to move off it
    # The same config again (a restarted driver container): nothing restarts.
    state.write_text("new\n")
    node.labels.history.clear()
    assert node.run() == "no NVIDIA module loaded: nothing to uninstall"
    assert node.labels.values_of(DP) == []


def test_full_uninstall_evicts_gpu_pods_and_restores_everything(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules()
    assert node.run() == "modules unloaded: ready for the driver install"
    assert node.loaded() == []
    assert node.cluster.evictions == ["train-0"], "only the GPU pod, through the Eviction API"
    assert [p.name for p in node.cluster.pods] == ["cpu-only"]  # dp left with its paused deploy label
    assert node.labels.values_of(DP) == ["paused-for-driver-upgrade", "true"]
    assert node.labels.values["nvidia.com/gpu.deploy.dcgm"] == "false"
    assert node.cluster.cordons == [True, False]
    assert CORDONED_ANNOTATION not in node.cluster.annotations
    with pytest.raises(GpuNotFoundError):
        node.backend.devices()  # the simulated GPUs went away with the nvidia module


def test_pdb_blocks_eviction_and_the_node_is_restored(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules()
    node.cluster.pdb_blocked.add("train-0")
    with pytest.raises(DriverManagerError, match=r"ml/train-0 \(blocked by a PodDisruptionBudget\)"):
        node.run()
    assert [p.name for p in node.cluster.pods if p.name == "train-0"] == ["train-0"], "never deleted behind the PDB"
    assert node.loaded() == ["nvidia_modeset", "nvidia_uvm", "nvidia"], "modules untouched"
    assert node.labels.values[DP] == "true"
    assert node.cluster.unschedulable is False, "our cordon is lifted on failure"


def test_pdb_that_relents_lets_the_eviction_finish(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules()
    node.cluster.pdb_blocked.add("train-0")
    node.cluster.pdb_blocks = 3  # the budget allows the disruption once other replicas are back
    assert node.run().startswith("modules unloaded")
    assert node.cluster.evictions == ["train-0"] * 4


def test_auto_drain_after_failed_eviction_respects_drain_rules(tmp_path: Path) -> None:
    node = Node(tmp_path, ENABLE_AUTO_DRAIN="true")
    node.load_modules()
    node.cluster.pdb_blocked.add("train-0")
    node.cluster.pdb_blocks = 25  # blocks the eviction phase (20 s), relents during the drain
    assert node.run().startswith("modules unloaded")
    assert "cpu-only" in node.cluster.evictions, "the drain evicts every non-DaemonSet pod"
    assert node.cluster.pods == []


def test_busy_module_fails_with_the_reason_and_restores(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules(busy="nvidia")
    with pytest.raises(DriverManagerError, match="cannot unload nvidia: in use by 2 user"):
        node.run()
    assert node.labels.values[DP] == "true"


def test_digest_unchanged_keeps_the_driver(tmp_path: Path) -> None:
    node = Node(tmp_path, DRIVER_CONFIG_DIGEST="abc123")
    node.load_modules()
    state = node.ctx.path(STATE_FILE)
    state.parent.mkdir(parents=True)
    state.write_text("abc123\n")
    assert node.run() == "driver config digest unchanged: the loaded driver is kept"
    assert node.loaded() == ["nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert node.cluster.evictions == []
    assert node.labels.values[DP] == "true"
    node.ctx.env["FORCE_REINSTALL"] = "true"
    assert node.run().startswith("modules unloaded")


def test_upgrade_controller_annotation_disables_local_eviction(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules()
    node.cluster.annotations["nvidia.com/gpu-driver-upgrade-enabled"] = "true"
    node.run()
    assert node.cluster.evictions == []
    assert node.cluster.cordons == []


def test_an_admin_cordon_is_left_alone(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.load_modules()
    node.cluster.unschedulable = True
    node.run()
    assert node.cluster.unschedulable is True
    assert node.cluster.cordons == []


def test_settings_and_durations() -> None:
    s = settings_from_env(
        {"DRAIN_TIMEOUT_SECONDS": "2m", "ENABLE_GPU_POD_EVICTION": "false", "DRIVER_CONFIG_DIGEST": "d"}
    )
    assert (s.eviction.timeout, s.eviction.gpu_pod_eviction, s.eviction.auto_drain, s.digest) == (
        120.0,
        False,
        False,
        "d",
    )
    assert settings_from_env({}).eviction.timeout == 300.0  # "0s" upstream means forever: bounded here
    assert manager.seconds("500ms", name="x") == 0.5
    with pytest.raises(DriverManagerError, match="X: not a duration"):
        manager.seconds("soon", name="X")
    assert isinstance(s, ManagerSettings)


def test_main_needs_cluster_access(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]))
    with pytest.raises(DriverManagerError, match="needs cluster access"):
        asyncio.run(manager.main(ctx))
