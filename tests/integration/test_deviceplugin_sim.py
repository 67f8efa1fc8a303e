"""The real device plugin and feature discovery on simulated nodes of the real control plane.

One DaemonSet runs both agents (as the operator will); a ConfigMap holds named plugin configs.
Checks: allocatable equals the GPU count, a 2-GPU pod on an NVSwitch node gets two devices in its
environment, an XID lowers allocatable by one and recovery restores it, a kubelet restart is followed
by re-registration with the same allocatable, the node config label switches to time-slicing without
restarting the plugin pod, MIG mixed advertises per-profile resources, and GFD labels only GPU nodes.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.context import ProgramContext
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
CONFIGS = {
    "default": "version: v1\n",
    "ts4": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
}


def _objects(namespace: str) -> list[JSON]:
    env = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MIG_STRATEGY", "value": "mixed"},
        {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
        {"name": "DEFAULT_CONFIG", "value": "default"},
    ]
    mount = [{"name": "configs", "mountPath": "/available-configs"}]
    containers = [
        {
            "name": "device-plugin",
            "image": "gpu-operator:test",
            "command": ["gpu-operator", "agent", "device-plugin"],
            "env": env,
            "volumeMounts": mount,
        },
        {
            "name": "gfd",
            "image": "gpu-operator:test",
            "command": ["gpu-operator", "agent", "feature-discovery"],
            "env": [
                *env,
                {"name": "GFD_LABEL_NODE", "value": "true"},
                {"name": "GFD_SLEEP_INTERVAL", "value": "2s"},
                {"name": "GFD_OUTPUT_FILE", "value": ""},
            ],
            "volumeMounts": mount,
        },
    ]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "plugin-configs", "namespace": namespace},
        "data": CONFIGS,
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-agents", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "gpu-agents"}},
            "template": {
                "metadata": {"labels": {"app": "gpu-agents"}},
                "spec": {
                    "nodeSelector": {
                        "feature.node.kubernetes.io/pci-10de.present": "true",
                        "gpu-operator.sim/node": "true",
                    },
                    "terminationGracePeriodSeconds": 5,
                    "containers": containers,
                    "volumes": [{"name": "configs", "configMap": {"name": "plugin-configs"}}],
                },
            },
        },
    }
    return [config_map, daemonset]


def _allocatable(client: Client, node: str) -> dict[str, str]:
    status = client.get(Node, node).to_dict()["status"]
    return {k: v for k, v in status.get("allocatable", {}).items() if k.startswith("nvidia.com/")}


def _labels(client: Client, node: str) -> dict[str, str]:
    return dict(client.get(Node, node).metadata.labels or {})  # type: ignore[union-attr]


def _agent_pod(client: Client, namespace: str, node: str) -> JSON:
    pods = [p.to_dict() for p in client.list(Pod, namespace=namespace, labels={"app": "gpu-agents"})]
    return next(p for p in pods if p["spec"].get("nodeName") == node)


@pytest.mark.timeout(240)
def test_device_plugin_and_gfd_on_simulated_nodes(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory
) -> None:
    dgx, a100, cpu = sim_nodes("dgx-h100:1,a100-mig:1,cpu-only:1")
    # MIG on the A100 node before the agents start: GPU 0 as 7 x 1g.5gb, GPU 1 as 3g.20gb + 2g.10gb.
    mig = simulator.node(a100).gpu
    for index in (0, 1):
        mig.set_mig_mode(index, enabled=True)
        mig.reset_gpu(index)  # type: ignore[attr-defined]
    mig.create_mig_devices(0, profiles=["1g.5gb"] * 7)
    mig.create_mig_devices(1, profiles=["3g.20gb", "2g.10gb"])
    seen: dict[str, ProgramContext] = {}

    async def gpu_user(ctx: ProgramContext) -> None:
        seen["ctx"] = ctx
        await ctx.stopped()

    registry = agent_registry()
    for name in ("device-plugin", "feature-discovery"):
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)
    sim_program("gpu-user", gpu_user)
    for obj in _objects(namespace):
        client.create(codecs.from_dict(obj))

    wait_for(lambda: _allocatable(client, dgx).get(GPU) == "8", timeout=60, describe="8 GPUs allocatable on dgx")
    wait_for(
        lambda: (
            _allocatable(client, a100)
            == {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-2g.10gb": "1", "nvidia.com/mig-3g.20gb": "1"}
        ),
        timeout=60,
        describe="MIG mixed resources on the A100 node",
    )
    wait_for(lambda: "nvidia.com/gpu.product" in _labels(client, a100), timeout=30, describe="GFD labels")
    dgx_labels = _labels(client, dgx)
    assert dgx_labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert dgx_labels["nvidia.com/gpu.count"] == "8"
    assert _labels(client, a100)["nvidia.com/mig-1g.5gb.count"] == "7"
    assert not any(k.startswith("nvidia.com/gpu.") for k in _labels(client, cpu))
    assert _allocatable(client, cpu) == {}

    # A pod asking for 2 GPUs on the NVSwitch node gets two devices in its environment.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": dgx},
            "containers": [
                {
                    "name": "main",
                    "image": "gpu-operator:test",
                    "command": ["gpu-operator", "agent", "gpu-user"],
                    "resources": {"limits": {GPU: "2"}},
                }
            ],
        },
    }
    client.create(codecs.from_dict(pod))
    wait_for(lambda: "ctx" in seen, timeout=30, describe="the GPU pod running")
    visible = seen["ctx"].devices[0].envs["NVIDIA_VISIBLE_DEVICES"].split(",")
    uuids = {d.uuid for d in simulator.node(dgx).gpu.devices()}
    assert len(set(visible)) == 2
    assert set(visible) <= uuids

    # XID 79 on GPU 3 lowers allocatable by one; recovery brings it back.
    plugin_pod = _agent_pod(client, namespace, dgx)
    simulator.inject_xid(dgx, gpu=3, xid=79)
    wait_for(lambda: _allocatable(client, dgx).get(GPU) == "7", timeout=10, describe="allocatable 7 after XID")
    simulator.recover_gpu(dgx, gpu=3)
    wait_for(lambda: _allocatable(client, dgx).get(GPU) == "8", timeout=10, describe="allocatable 8 after recovery")

    # Kubelet restart: the plugin re-registers and allocatable is the same.
    simulator.restart_kubelet(dgx)
    wait_for(
        lambda: _allocatable(client, dgx).get(GPU) == "8", timeout=15, describe="allocatable after kubelet restart"
    )

    # The node's config label switches to time-slicing, live: same plugin pod, no restart.
    client.patch(Node, dgx, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "ts4"}}})
    wait_for(lambda: _allocatable(client, dgx).get(GPU) == "32", timeout=30, describe="time-slicing x4")
    wait_for(lambda: _labels(client, dgx).get("nvidia.com/gpu.replicas") == "4", timeout=30, describe="GFD replicas")
    after = _agent_pod(client, namespace, dgx)
    assert after["metadata"]["uid"] == plugin_pod["metadata"]["uid"]
    assert all(c.get("restartCount", 0) == 0 for c in after["status"]["containerStatuses"])
