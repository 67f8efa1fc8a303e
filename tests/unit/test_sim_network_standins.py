"""The simulator's stand-ins for the network operator's containers: the OFED driver loads (``.driver-ready``,
modules) before it reports Ready and unloads when stopped, its faults, the device plugins that refuse to run
without the driver, and how the runtime picks them by container name. No sleeping: the load delay is set to
0 through the node's file and programs wait on the context's stop signal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpu_operator.gpu.null import NullBackend
from gpu_operator.names import network
from gpu_operator.sim.control import faults
from gpu_operator.sim.kubelet.node import SimNode
from gpu_operator.sim.objects import NodeShape
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.context import ProgramContext, Signals
from gpu_operator.sim.programs.launcher import Outcome, ProgramRun
from gpu_operator.sim.programs.netstandins import (
    FAULT_FILE,
    LOAD_SECONDS_FILE,
    MODULES,
    NETWORK_STANDINS,
    OFED_LOAD_SECONDS,
    load_seconds,
    loaded_modules,
    read_fault,
)
from gpu_operator.sim.programs.programs import ProgramRegistry
from gpu_operator.sim.programs.standins import PROGRAM_PREFIX, programs, standin_name

OFED_IMAGE = "nvcr.io/nvidia/mellanox/doca-driver:25.04-0.6.1.0-2-ubuntu22.04-amd64"
RDMA_IMAGE = "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"


class Node:
    """One simulated node's host root, with the OFED container's mount of /run/mellanox/drivers."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "host"
        self.drivers = self.root / network.DRIVERS_DIR.lstrip("/")
        self.ready_file = self.root / network.DRIVER_READY.lstrip("/")
        self.tmp = tmp_path
        self.write(LOAD_SECONDS_FILE, "0")  # no waiting in unit tests

    def write(self, node_path: str, text: str) -> None:
        path = self.root / node_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def context(self, container: str, *, image: str, signals: Signals, mounted: bool = True) -> ProgramContext:
        mounts = {network.DRIVERS_DIR: self.drivers} if mounted else {}
        return ProgramContext(
            node_name="nic-0",
            namespace="nvidia-network-operator",
            pod_name=f"{container}-pod",
            pod_uid="uid",
            container_name=container,
            program=f"{PROGRAM_PREFIX}{container}",
            argv=(image,),  # what the runtime passes a stand-in
            env={},
            host_root=self.root,
            plugin_dir=self.tmp / "dp",
            pod_resources_socket=self.tmp / "pr.sock",
            gpu=NullBackend(),
            rootfs=self.tmp / "rootfs" / container,
            mounts=mounts,
            signals=signals,
        )


class Started:
    """A stand-in started the way the runtime starts one; readiness calls recorded."""

    def __init__(self, node: Node, container: str, *, image: str, mounted: bool = True) -> None:
        registry = ProgramRegistry()
        for name, program in programs().items():
            registry.register_program(name, program)
        chosen = standin_name(container=container, command=(), args=())
        assert chosen is not None
        spec = registry.get(chosen)
        assert spec is not None
        assert not spec.threaded
        self.readiness: list[bool] = []
        signals = Signals(loop=asyncio.get_running_loop(), on_ready=self.readiness.append)
        ctx = node.context(container, image=image, signals=signals, mounted=mounted)
        self.run = ProgramRun(spec=spec, ctx=ctx, signals=signals, label=container)

    async def settle(self) -> None:
        """Let the program run until it waits (loop turns only, no time passes)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def stop(self) -> Outcome:
        self.run.stop()
        return await self.run.outcome()


def _drive(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_ofed_loads_then_reports_ready_and_unloads_when_stopped(tmp_path: Path) -> None:
    node = Node(tmp_path)
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await started.settle()
        seen["ready"] = list(started.readiness)
        seen["file"] = node.ready_file.exists()
        seen["modules"] = loaded_modules(node.root)
        seen["exported"] = (node.drivers / "usr/src/ofa_kernel/default").is_dir()
        return await started.stop()

    outcome = _drive(scenario)
    assert seen == {"ready": [True], "file": True, "modules": list(MODULES), "exported": True}
    assert "mlx5_core" in seen["modules"]  # what the liveness/readiness probe greps lsmod for
    assert outcome.exit_code == 0
    assert not node.ready_file.exists()  # unloaded: nothing may take the driver as loaded
    assert loaded_modules(node.root) == []
    assert node.drivers.is_dir()  # the hostPath itself stays


def test_ofed_is_not_ready_before_the_file_exists(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.write(LOAD_SECONDS_FILE, "3600")  # stopped long before it would finish loading
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await started.settle()
        seen["ready"], seen["file"] = list(started.readiness), node.ready_file.exists()
        return await started.stop()

    outcome = _drive(scenario)
    assert seen == {"ready": [], "file": False}
    assert outcome.exit_code == 0


def test_ofed_without_the_mount_writes_nothing_the_node_sees(tmp_path: Path) -> None:
    node = Node(tmp_path)

    async def scenario() -> None:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE, mounted=False)
        await started.settle()
        assert not node.ready_file.exists()  # a DaemonSet that forgot the hostPath gates nothing
        assert (tmp_path / "rootfs" / network.OFED_CONTAINER / network.DRIVER_READY.lstrip("/")).exists()
        await started.stop()

    _drive(scenario)


def test_ofed_fail_fault_exits_1_without_loading(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.write(FAULT_FILE, "fail\n")

    async def scenario() -> Outcome:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        return await started.run.outcome()

    outcome = _drive(scenario)
    assert outcome.exit_code == 1
    assert "simulated fault" in outcome.message
    assert OFED_IMAGE in outcome.message
    assert not node.ready_file.exists()
    assert loaded_modules(node.root) == []


def test_ofed_hang_fault_never_becomes_ready(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.write(FAULT_FILE, "hang")
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await started.settle()
        seen["ready"], seen["file"], seen["done"] = list(started.readiness), node.ready_file.exists(), started.run.done
        return await started.stop()

    outcome = _drive(scenario)
    assert seen == {"ready": [], "file": False, "done": False}
    assert outcome.exit_code == 0


def test_ofed_fault_for_another_image_does_not_apply(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.write(FAULT_FILE, "fail 99.99-0")
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await started.settle()
        seen["ready"] = list(started.readiness)
        return await started.stop()

    outcome = _drive(scenario)
    assert seen["ready"] == [True]
    assert outcome.exit_code == 0


def test_a_crashed_ofed_leaves_the_driver_and_the_next_start_reloads(tmp_path: Path) -> None:
    node = Node(tmp_path)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        first = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await first.settle()
        first.run.crash("injected")
        crashed = await first.run.outcome()
        seen["crash"] = (crashed.exit_code, node.ready_file.exists())
        node.write(LOAD_SECONDS_FILE, "3600")
        second = Started(node, network.OFED_CONTAINER, image=OFED_IMAGE)
        await second.settle()
        seen["restarted"] = (node.ready_file.exists(), loaded_modules(node.root), list(second.readiness))
        await second.stop()

    _drive(scenario)
    assert seen["crash"] == (1, True)  # a dead process unloads nothing
    assert seen["restarted"] == (False, [], [])  # the new container starts the load from scratch


@pytest.mark.parametrize("container", [network.RDMA_DP_CONTAINER, network.SRIOV_DP_CONTAINER])
def test_device_plugins_refuse_to_start_without_the_driver(tmp_path: Path, container: str) -> None:
    node = Node(tmp_path)

    async def scenario() -> Outcome:
        return await Started(node, container, image=RDMA_IMAGE).run.outcome()

    outcome = _drive(scenario)
    assert outcome.exit_code == 1
    assert network.DRIVER_READY in outcome.message
    assert "nic-0" in outcome.message


@pytest.mark.parametrize("container", [network.RDMA_DP_CONTAINER, network.SRIOV_DP_CONTAINER])
def test_device_plugins_run_once_the_driver_is_loaded(tmp_path: Path, container: str) -> None:
    node = Node(tmp_path)
    node.write(network.DRIVER_READY, "")
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, container, image=RDMA_IMAGE)
        await started.settle()
        seen["ready"], seen["done"] = list(started.readiness), started.run.done
        return await started.stop()

    outcome = _drive(scenario)
    assert seen == {"ready": [True], "done": False}
    assert outcome.exit_code == 0


OTHERS = [
    network.MULTUS_CONTAINER,
    network.CNI_PLUGINS_CONTAINER,
    network.IPOIB_CONTAINER,
    network.IB_KUBERNETES_CONTAINER,
    network.NV_IPAM_NODE_CONTAINER,
    network.NV_IPAM_CONTROLLER_CONTAINER,
    network.NIC_FD_CONTAINER,
    network.DOCA_TELEMETRY_CONTAINER,
]


@pytest.mark.parametrize("container", OTHERS)
def test_other_operands_are_ready_until_stopped(tmp_path: Path, container: str) -> None:
    node = Node(tmp_path)  # no driver needed
    seen: dict[str, Any] = {}

    async def scenario() -> Outcome:
        started = Started(node, container, image=f"ghcr.io/mellanox/{container}:v1")
        await started.settle()
        seen["ready"], seen["done"] = list(started.readiness), started.run.done
        return await started.stop()

    outcome = _drive(scenario)
    assert seen == {"ready": [True], "done": False}
    assert outcome.exit_code == 0


def test_the_init_container_exits_at_once(tmp_path: Path) -> None:
    async def scenario() -> Outcome:
        return await Started(Node(tmp_path), network.OFED_INIT_CONTAINER, image="x:1").run.outcome()

    assert _drive(scenario).exit_code == 0


def test_every_network_container_has_a_registered_standin() -> None:
    names = {network.OFED_CONTAINER, network.OFED_INIT_CONTAINER, network.RDMA_DP_CONTAINER}
    names |= {network.SRIOV_DP_CONTAINER, *OTHERS}
    assert set(NETWORK_STANDINS) == names
    registry = agent_registry()  # what `gpu-operator sim up` runs
    for container in names:
        # The image is not ours and the command is the image's own: the container name decides.
        chosen = standin_name(container=container, command=("/entrypoint.sh",), args=("--cni-version=0.3.1",))
        assert chosen == f"{PROGRAM_PREFIX}{container}"
        assert registry.get(chosen) is not None
    assert standin_name(container="some-other-container", command=(), args=()) is None


def test_fault_and_delay_files(tmp_path: Path) -> None:
    path = tmp_path / "fault"
    assert read_fault(path, image=OFED_IMAGE) == ""
    cases: list[tuple[str, str]] = [
        ("fail", "fail"),
        ("hang\n", "hang"),
        ("fail 25.04", "fail"),
        ("fail 24.10", ""),
        ("explode", ""),
        ("", ""),
    ]
    for text, expected in cases:
        path.write_text(text, encoding="utf-8")
        assert read_fault(path, image=OFED_IMAGE) == expected, text
    delay = tmp_path / "load-seconds"
    assert load_seconds(delay) == OFED_LOAD_SECONDS
    for text, seconds in [("2.5", 2.5), ("-1", 0.0), ("soon", OFED_LOAD_SECONDS)]:
        delay.write_text(text, encoding="utf-8")
        assert load_seconds(delay) == seconds


def _fake_node(tmp_path: Path, *, nics: int) -> SimNode:
    shape = NodeShape(
        profile="cpu-only",
        gpu_count=0,
        cpu_cores=16,
        memory_mib=65536,
        os_id="ubuntu",
        os_version_id="22.04",
        kernel_version="5.15.0-105-generic",
        nic_model="cx7" if nics else "",
        nic_count=nics,
    )
    return cast(SimNode, SimpleNamespace(name="nic-0", host_root=tmp_path, shape=shape))


def test_the_ofed_fault_is_written_where_the_standin_reads_it(tmp_path: Path) -> None:
    node = _fake_node(tmp_path, nics=2)
    marker = tmp_path / FAULT_FILE.lstrip("/")
    message = asyncio.run(faults.ofed_fault(node, mode="fail", image_contains="25.04"))
    assert "fail" in message
    assert "25.04" in message
    assert read_fault(marker, image=OFED_IMAGE) == "fail"
    assert read_fault(marker, image=OFED_IMAGE.replace("25.04", "25.07")) == ""
    asyncio.run(faults.ofed_fault(node, mode="hang"))
    assert read_fault(marker, image="anything") == "hang"
    asyncio.run(faults.ofed_fault(node, mode="clear"))
    assert not marker.exists()
    with pytest.raises(faults.FaultError, match="unknown OFED fault"):
        asyncio.run(faults.ofed_fault(node, mode="explode"))
    with pytest.raises(faults.FaultError, match="no Mellanox NIC"):
        asyncio.run(faults.ofed_fault(_fake_node(tmp_path, nics=0), mode="fail"))
