"""The validator chain on simulated nodes: init containers pass on a healthy node and the node status
exporter reports it; each component fails with a precise message when its prerequisite is broken; the wait
mode continues within a second of the prerequisite file appearing.

The toolkit's output (a CDI spec and a containerd config naming the ``nvidia`` runtime) is written into the
node's host root by the test, standing in for the container toolkit agent of [6/9]; the device plugin is
the real agent (``gpu-operator agent device-plugin``).
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Pod

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.nodestatus import program as node_status
from gpu_operator.agents.validator import program as validator
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
CDI_SPEC = '{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}'
CONTAINERD = (
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def container(name: str, program: str, **env: str) -> JSON:
    values = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    values += [{"name": k, "value": v} for k, v in env.items()]
    return {"name": name, "image": "gpu-operator:test", "command": ["gpu-operator", "agent", program], "env": values}


def pod(name: str, namespace: str, node: str, *, containers: list[JSON], init: list[JSON] | None = None) -> Any:
    spec: JSON = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "restartPolicy": "Never" if not init else "Always",
        "terminationGracePeriodSeconds": 2,
        "containers": containers,
    }
    if init:
        spec["initContainers"] = init
    return codecs.from_dict(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    )


def status(client: Client, name: str, namespace: str) -> JSON:
    return dict(client.get(Pod, name, namespace=namespace).to_dict().get("status", {}))


def write_toolkit_output(host_root: Path) -> None:
    cdi = host_root / "var/run/cdi/nvidia.com-gpu.json"
    cdi.parent.mkdir(parents=True, exist_ok=True)
    cdi.write_text(CDI_SPEC, encoding="utf-8")
    config = host_root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONTAINERD, encoding="utf-8")


def register(sim_program: SimProgramFactory) -> None:
    sim_program("validator", validator.main)
    sim_program("node-status-exporter", node_status.main)
    sim_program("device-plugin", device_plugin.main)


@pytest.mark.timeout(120)
def test_chain_passes_on_a_healthy_node_and_is_exported(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory
) -> None:
    (node,) = sim_nodes("dgx-h100:1")
    register(sim_program)
    host_root = simulator.node(node).host_root
    write_toolkit_output(host_root)
    client.create(pod("device-plugin", namespace, node, containers=[container("main", "device-plugin")]))
    port = free_port()
    init = [
        container(f"{c}-validation", "validator", COMPONENT=c, WITH_WAIT="true", SLEEP_INTERVAL_SECONDS="1")
        for c in ("driver", "toolkit", "cuda", "plugin")
    ]
    exporter = container("metrics", "node-status-exporter", NODE_STATUS_EXPORTER_LISTEN=f"127.0.0.1:{port}")
    client.create(pod("validator", namespace, node, containers=[exporter], init=init))
    wait_for(
        lambda: status(client, "validator", namespace).get("phase") == "Running",
        timeout=60,
        describe="every validation passed and the node status exporter runs",
    )
    validations = host_root / "run/nvidia/validations"
    assert sorted(p.name for p in validations.iterdir()) == [
        "cuda-ready",
        "driver-ready",
        "plugin-ready",
        "toolkit-ready",
    ]
    assert "IS_HOST_DRIVER=true\n" in (validations / "driver-ready").read_text(encoding="utf-8")

    def scraped() -> str | None:
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        return body if "gpu_operator_node_plugin_ready 1" in body else None

    body = wait_for(scraped, timeout=15, describe="node status metrics", retry_on=(httpx.HTTPError,))
    for component in ("driver", "toolkit", "cuda", "plugin"):
        assert f"gpu_operator_node_{component}_ready 1\n" in body
    assert "gpu_operator_node_device_plugin_devices_total 8\n" in body


def terminated_message(client: Client, name: str, namespace: str) -> str | None:
    for entry in status(client, name, namespace).get("containerStatuses") or []:
        terminated = entry.get("state", {}).get("terminated")
        if terminated:
            return str(terminated.get("message", ""))
    return None


@pytest.mark.timeout(120)
def test_components_fail_with_precise_messages(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory
) -> None:
    no_driver, no_runtime, no_plugin = sim_nodes("dgx-h100:3")
    register(sim_program)
    gpus = simulator.node(no_driver).gpu
    assert isinstance(gpus, SimulatedBackend)
    gpus.set_present(False)
    for node, files in ((no_runtime, ["driver-ready"]), (no_plugin, ["driver-ready", "toolkit-ready"])):
        ready = simulator.node(node).host_root / "run/nvidia/validations"
        ready.mkdir(parents=True)
        for name in files:
            (ready / name).write_text("", encoding="utf-8")
        cdi = simulator.node(node).host_root / "var/run/cdi/nvidia.com-gpu.json"
        cdi.parent.mkdir(parents=True)
        cdi.write_text(CDI_SPEC, encoding="utf-8")
    cases = {
        "driver": (no_driver, "driver validation failed: no NVIDIA driver: NVIDIA driver not loaded on simulated node"),
        "toolkit": (no_runtime, "no container runtime config defines a 'nvidia' runtime (looked at"),
        "plugin": (no_plugin, f"node {no_plugin} advertises no allocatable nvidia.com/gpu or nvidia.com/mig-*"),
        "cuda": (no_driver, "cuda validation needs"),
    }
    for component, (node, _) in cases.items():
        spec = container("main", "validator", COMPONENT=component, WITH_WAIT="false")
        client.create(pod(f"{component}-check", namespace, node, containers=[spec]))
    for component, (_, expected) in cases.items():
        name = f"{component}-check"
        message = wait_for(
            functools.partial(terminated_message, client, name, namespace),
            timeout=30,
            describe=f"{component} validation ended",
        )
        assert status(client, f"{component}-check", namespace)["phase"] == "Failed"
        assert expected in message, message
        assert message.startswith("ValidationError: ")
    assert not (simulator.node(no_plugin).host_root / "run/nvidia/validations/plugin-ready").exists()


@pytest.mark.timeout(120)
def test_wait_mode_continues_within_a_second(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    (node,) = sim_nodes("dgx-h100:1")
    register(sim_program)
    caplog.set_level(logging.INFO)
    host_root = simulator.node(node).host_root
    write_toolkit_output(host_root)
    spec = container("main", "validator", COMPONENT="toolkit", WITH_WAIT="true")
    client.create(pod("toolkit-wait", namespace, node, containers=[spec]))
    wait_for(
        lambda: status(client, "toolkit-wait", namespace).get("phase") == "Running",
        timeout=30,
        describe="the toolkit validation waiting",
    )
    validations = host_root / "run/nvidia/validations"
    # It really waits: it looked for driver-ready, said it waits for it, and wrote nothing.
    wait_for(lambda: any(r.getMessage().startswith("waiting for") and "prerequisite driver-ready" in r.getMessage()
                         for r in caplog.records), timeout=10, interval=0.05, describe="it waits")  # fmt: skip
    assert not (validations / "toolkit-ready").exists()
    (validations / "driver-ready").write_text("IS_HOST_DRIVER=true\n", encoding="utf-8")
    began = time.monotonic()
    wait_for((validations / "toolkit-ready").exists, timeout=5, interval=0.02, describe="toolkit-ready")
    assert time.monotonic() - began < 1.0
    wait_for(
        lambda: status(client, "toolkit-wait", namespace).get("phase") == "Succeeded",
        timeout=15,
        describe="the toolkit validation completed",
    )
