"""The MIG manager on a simulated A100 node of the real control plane, with the real device plugin running as
a DaemonSet (mixed strategy): all-disabled -> all-1g.5gb -> all-disabled, states pending -> success, the
geometry on the node's GPUs, the device plugin paused meanwhile, restored, and advertising the new
resources; a GPU client that never stops makes the change fail after the timeout with the labels restored.

The simulator's context does not provide ``ctx.cluster`` yet: :func:`with_cluster` adds a
:class:`LightkubeCluster` (admin credentials) around it, which is what the context is asked to provide.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, Client, codecs
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.migmanager import program as mig_manager
from gpu_operator.agents.migmanager.reconfigure import REASON_ANNOTATION, STATE_LABEL
from gpu_operator.agents.shared.cluster import NodeCluster
from gpu_operator.agents.toolkit import program as toolkit
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kube.nodecluster import LightkubeCluster
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.context import NodeLabels, ProgramContext
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
DP = "nvidia.com/gpu.deploy.device-plugin"
GFD = "nvidia.com/gpu.deploy.gpu-feature-discovery"


@dataclass(frozen=True)
class ClusterContext:
    """A ProgramContext plus ``cluster``: the AgentContext the driver and MIG managers expect."""

    inner: ProgramContext
    cluster: NodeCluster

    @property
    def node_name(self) -> str:
        return self.inner.node_name

    @property
    def env(self) -> Mapping[str, str]:
        return self.inner.env

    @property
    def plugin_dir(self) -> Path:
        return self.inner.plugin_dir

    @property
    def gpu(self) -> GpuBackend:
        return self.inner.gpu

    @property
    def node(self) -> NodeLabels | None:
        return self.inner.node

    def path(self, container_path: str) -> Path:
        return self.inner.path(container_path)

    def host_path(self, node_path: str) -> Path:
        return self.inner.host_path(node_path)

    def set_ready(self, ready: bool = True) -> None:
        self.inner.set_ready(ready)

    async def sleep(self, seconds: float | None) -> bool:
        return await self.inner.sleep(seconds)


def with_cluster(
    entry: Callable[[ClusterContext], Awaitable[None]], *, kubeconfig: Path
) -> Callable[[ProgramContext], Awaitable[None]]:
    async def program(ctx: ProgramContext) -> None:
        api = AsyncClient(KubeConfig.from_file(kubeconfig), field_manager="gpu-operator-agent", trust_env=False)
        try:
            await entry(ClusterContext(inner=ctx, cluster=LightkubeCluster(node_name=ctx.node_name, client=api)))
        finally:
            await api.close()

    return program


def agent_pod(
    *,
    name: str,
    namespace: str,
    node: str,
    program: str,
    env: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
) -> JSON:
    container = {
        "name": "agent",
        "image": "gpu-operator:test",
        "command": ["gpu-operator", "agent", program],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]},
    }


def device_plugin_daemonset(*, namespace: str, node: str) -> JSON:
    labels = {"app": "nvidia-device-plugin-daemonset"}
    container = {
        "name": "plugin",
        "image": "gpu-operator:test",
        "command": ["gpu-operator", "agent", "device-plugin"],
        "env": [{"name": "MIG_STRATEGY", "value": "mixed"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {DP: "true", "kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def _labels(client: Client, node: str) -> dict[str, str]:
    return dict(client.get(Node, node).metadata.labels or {})  # type: ignore[union-attr]


def _capacity(client: Client, node: str, *, field: str = "capacity") -> dict[str, str]:
    status = client.get(Node, node).status
    return {k: str(v) for k, v in (getattr(status, field) or {}).items()} if status else {}


def switch(client: Client, node: str, config: str, *, timeout: float = 60) -> list[str]:
    """Set nvidia.com/mig.config; returns the distinct state values seen until it settles."""
    client.patch(Node, node, {"metadata": {"labels": {"nvidia.com/mig.config": config, STATE_LABEL: None}}})
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _labels(client, node).get(STATE_LABEL)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if state in ("success", "failed"):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{STATE_LABEL} did not settle within {timeout} s (seen {seen})")


@pytest.fixture
def mig_node(
    client: Client,
    namespace: str,
    local_cluster: LocalCluster,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> str:
    (node,) = sim_nodes("a100-mig:1")
    sim_program("device-plugin", device_plugin.main)
    sim_program("mig-manager", with_cluster(mig_manager.main, kubeconfig=local_cluster.kubeconfig_path))
    sim_program("toolkit", toolkit.main)
    client.patch(
        Node, node, {"metadata": {"labels": {DP: "true", GFD: "true", "nvidia.com/mig.config": "all-disabled"}}}
    )
    client.create(codecs.from_dict(device_plugin_daemonset(namespace=namespace, node=node)))
    wait_for(lambda: _capacity(client, node).get("nvidia.com/gpu") == "2", timeout=60, describe="2 GPUs advertised")
    return node


@pytest.mark.timeout(120)
def test_mig_switch_to_all_1g_and_back(client: Client, namespace: str, simulator: Simulator, mig_node: str) -> None:
    node = mig_node
    env = {"MIG_POLL_INTERVAL": "0.2", "MIG_WAIT_TIMEOUT": "30"}
    client.create(
        codecs.from_dict(agent_pod(name="mig", namespace=namespace, node=node, program="mig-manager", env=env))
    )
    # The toolkit keeps the node's CDI spec current: MIG devices appear in it after the switch.
    toolkit_env = {"CDI_ENABLED": "true", "CDI_REFRESH_INTERVAL": "0.2"}
    client.create(
        codecs.from_dict(agent_pod(name="tk", namespace=namespace, node=node, program="toolkit", env=toolkit_env))
    )
    spec_file = simulator.node(node).host_root / "var/run/cdi/nvidia.com-gpu.json"

    def cdi_names() -> set[str]:
        try:
            return {d["name"] for d in json.loads(spec_file.read_text())["devices"]}
        except (OSError, ValueError):
            return set()

    wait_for(lambda: "all" in cdi_names(), timeout=30, describe="the toolkit's CDI spec")
    wait_for(lambda: _labels(client, node).get(STATE_LABEL) == "success", timeout=30, describe="all-disabled applied")

    assert switch(client, node, "all-1g.5gb") == ["pending", "success"]
    gpu = simulator.node(node).gpu
    assert [sorted(m.profile for m in gpu.mig_devices(i)) for i in (0, 1)] == [["1g.5gb"] * 7] * 2
    assert _labels(client, node)[DP] == "true"
    wait_for(
        lambda: _capacity(client, node).get("nvidia.com/mig-1g.5gb") == "14",
        timeout=30,
        describe="the device plugin advertising 14 x nvidia.com/mig-1g.5gb",
    )
    mig_uuid = gpu.mig_devices(1)[6].uuid
    wait_for(lambda: {"0:6", "1:6", mig_uuid} <= cdi_names(), timeout=30, describe="MIG devices in the CDI spec")

    assert switch(client, node, "all-disabled") == ["pending", "success"]
    assert [d.mig_enabled for d in gpu.devices()] == [False, False]
    wait_for(lambda: _capacity(client, node).get("nvidia.com/gpu") == "2", timeout=30, describe="2 GPUs again")
    wait_for(lambda: "0:0" not in cdi_names(), timeout=30, describe="MIG devices gone from the CDI spec")
    # As on a kubelet, a resource whose plugin stopped advertising it keeps its capacity a while, unallocatable.
    wait_for(
        lambda: _capacity(client, node, field="allocatable").get("nvidia.com/mig-1g.5gb", "0") == "0",
        timeout=30,
        describe="no MIG device allocatable",
    )


@pytest.mark.timeout(120)
def test_forced_timeout_fails_with_labels_restored(
    client: Client, namespace: str, simulator: Simulator, mig_node: str
) -> None:
    node = mig_node
    # A GPU client no DaemonSet controls: pausing its label does not make it go, so the wait times out.
    stuck = agent_pod(
        name="gfd-stuck",
        namespace=namespace,
        node=node,
        program="sleep",
        env={},
        labels={"app": "gpu-feature-discovery"},
    )
    client.create(codecs.from_dict(stuck))
    wait_for(
        lambda: client.get(Pod, "gfd-stuck", namespace=namespace).to_dict()["status"].get("phase") == "Running",
        timeout=30,
        describe="stuck pod running",
    )
    env = {"MIG_POLL_INTERVAL": "0.2", "MIG_WAIT_TIMEOUT": "3"}
    client.create(
        codecs.from_dict(agent_pod(name="mig", namespace=namespace, node=node, program="mig-manager", env=env))
    )
    wait_for(lambda: _labels(client, node).get(STATE_LABEL) == "success", timeout=30, describe="all-disabled applied")

    assert switch(client, node, "all-1g.5gb") == ["pending", "failed"]
    labels = _labels(client, node)
    assert labels[DP] == "true"
    assert labels[GFD] == "true"
    annotations = client.get(Node, node).metadata.annotations or {}  # type: ignore[union-attr]
    assert f"waiting for GPU clients to stop: {namespace}/gfd-stuck" in annotations[REASON_ANNOTATION]
    assert [d.mig_enabled for d in simulator.node(node).gpu.devices()] == [False, False]
    wait_for(lambda: _capacity(client, node).get("nvidia.com/gpu") == "2", timeout=30, describe="device plugin back")
