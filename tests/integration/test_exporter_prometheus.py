"""A real Prometheus scrapes the exporter on a simulated 8-GPU node, and a pod holding a GPU shows in its series.

On a simulated dgx-h100: the real device plugin (``gpu-operator agent device-plugin``) registers
``nvidia.com/gpu``; the exporter (``gpu-operator agent exporter``) serves on a free port of 127.0.0.1
with its counter CSV from a ConfigMap volume and pod attribution through the node's PodResources socket;
a workload pod asks for one GPU. Prometheus (Debian's package) is started here with a temporary config
(``scrape_interval: 1s``) and data directory, and its HTTP API is polled.

The simulator materialises ConfigMap volumes once, at pod start, and does not sync later ConfigMap
changes the way the kubelet does; the run-time CSV change is therefore made as the kubelet would make
it, by replacing the file in the pod's volume directory (after updating the ConfigMap itself).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import ConfigMap, Node, Pod

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.exporter import program as exporter
from gpu_operator.kubelet.podresources import list_pod_resources_blocking
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.context import ProgramContext
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory
from tests.prometheus import Prometheus, free_port

JSON = dict[str, Any]
CSV_PATH = "/etc/dcgm-exporter/dcgm-metrics.csv"
FIRST_CSV = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilisation.\nDCGM_FI_DEV_FB_USED, gauge, Used framebuffer.\n"
FIRST_CSV += "DCGM_FI_DRIVER_VERSION, label, Driver version.\n"
SECOND_CSV = FIRST_CSV + "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw.\n"


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="prom-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pod(
    name: str, namespace: str, node: str, container: JSON, volumes: list[JSON] | None = None, labels: JSON | None = None
) -> Any:
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    container = {"image": "gpu-operator:test", "name": "main", **container}
    container["env"] = [node_name, *container.get("env", [])]
    spec: JSON = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    spec["terminationGracePeriodSeconds"] = 2
    if volumes:
        spec["volumes"] = volumes
    return codecs.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec,
        }
    )


def running(client: Client, name: str, namespace: str) -> bool:
    return bool(client.get(Pod, name, namespace=namespace).to_dict().get("status", {}).get("phase") == "Running")


@pytest.mark.timeout(120)
def test_prometheus_scrapes_gpu_metrics_with_pod_attribution(
    *,
    client: Client,
    namespace: str,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    workdir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (node,) = sim_nodes("dgx-h100:1")
    contexts: dict[str, ProgramContext] = {}

    async def exporter_program(ctx: ProgramContext) -> None:
        contexts["exporter"] = ctx
        await exporter.main(ctx)

    sim_program("device-plugin", device_plugin.main)
    sim_program("exporter", exporter_program)
    port = free_port()
    client.create(pod("device-plugin", namespace, node, {"command": ["gpu-operator", "agent", "device-plugin"]}))
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "metrics", "namespace": namespace}}
    client.create(codecs.from_dict({**config, "data": {"dcgm-metrics.csv": FIRST_CSV}}))
    env = {
        "DCGM_EXPORTER_LISTEN": f"127.0.0.1:{port}",
        "DCGM_EXPORTER_INTERVAL": "1000",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_EXPORTER_COLLECTORS": CSV_PATH,
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true",
    }
    container = {
        "command": ["gpu-operator", "agent", "exporter"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [{"name": "metrics", "mountPath": "/etc/dcgm-exporter"}],
    }
    client.create(pod("exporter", namespace, node, container, [{"name": "metrics", "configMap": {"name": "metrics"}}]))
    wait_for(
        lambda: client.get(Node, node).to_dict()["status"]["allocatable"].get("nvidia.com/gpu") == "8",
        timeout=30,
        describe="the device plugin advertising 8 GPUs",
    )
    user = {"command": ["gpu-operator", "agent", "sleep"], "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    client.create(pod("gpu-user", namespace, node, user, labels={"app.kubernetes.io/name": "bert"}))
    wait_for(lambda: running(client, "gpu-user", namespace), timeout=30, describe="pod gpu-user running")
    wait_for(lambda: running(client, "exporter", namespace), timeout=30, describe="pod exporter running")
    pods = list_pod_resources_blocking(socket=simulator.node(node).dirs.pod_resources_socket)
    (held,) = [d.device_ids for p in pods if p.name == "gpu-user" for c in p.containers for d in c.devices]
    devices = simulator.node(node).gpu.devices()
    uuid = held[0]
    simulator.node(node).gpu.set_load(next(d.index for d in devices if d.uuid == uuid), 80)  # type: ignore[attr-defined]

    prometheus = Prometheus(targets=[f"127.0.0.1:{port}"], workdir=workdir)
    try:
        util = prometheus.wait("DCGM_FI_DEV_GPU_UTIL", count=8)
        fb = prometheus.wait("DCGM_FI_DEV_FB_USED", count=8)
        for series in (util, fb):
            by_gpu = {s["metric"]["gpu"]: s["metric"] for s in series}
            assert sorted(by_gpu) == [str(i) for i in range(8)]
            for device in devices:
                labels = by_gpu[str(device.index)]
                assert labels["UUID"] == device.uuid
                assert labels["pci_bus_id"] == device.pci_bus_id
                assert labels["device"] == f"nvidia{device.index}"
                assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
                assert labels["Hostname"] == node
                assert labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
                assert labels["job"] == "gpu"
        (mine,) = prometheus.wait(f'DCGM_FI_DEV_GPU_UTIL{{pod="gpu-user",namespace="{namespace}"}}', count=1)
        assert mine["metric"]["UUID"] == uuid
        assert mine["metric"]["container"] == "main"
        # Pod labels and the UID come from the API server, as the two settings ask.
        user_pod = client.get(Pod, "gpu-user", namespace=namespace).to_dict()
        assert mine["metric"]["pod_uid"] == user_pod["metadata"]["uid"]
        assert mine["metric"]["app_kubernetes_io_name"] == "bert"
        assert float(mine["value"][1]) > 50
        assert len(prometheus.query('DCGM_FI_DEV_GPU_UTIL{pod!=""}')) == 1

        # The ConfigMap changes at run time: a new counter appears without restarting the exporter.
        cm = client.get(ConfigMap, "metrics", namespace=namespace)
        cm.data = {"dcgm-metrics.csv": SECOND_CSV}
        client.replace(cm)
        volume_file = contexts["exporter"].path(CSV_PATH)
        replace_like_kubelet(volume_file, SECOND_CSV)
        assert len(prometheus.wait("DCGM_FI_DEV_POWER_USAGE", count=8)) == 8

        # A malformed update keeps the previous set (and says which line is wrong).
        with caplog.at_level(logging.ERROR):
            replace_like_kubelet(volume_file, SECOND_CSV + "DCGM_FI_DEV_GPU_TEMP gauge temperature\n")
            wait_for(lambda: "line 5: expected 3 fields" in caplog.text, timeout=10, describe="the CSV error logged")
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert body.count("DCGM_FI_DEV_POWER_USAGE{") == 8
        assert "DCGM_FI_DEV_GPU_TEMP" not in body
        promtool = shutil.which("promtool")
        assert promtool is not None
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30, check=False
        )
        assert checked.returncode in (0, 3), checked.stdout + checked.stderr  # 3: DCGM's names fail the naming lint
        assert "error" not in (checked.stdout + checked.stderr).lower()
    finally:
        prometheus.close()


def replace_like_kubelet(path: Path, text: str) -> None:
    """Atomically replace the file, as the kubelet's atomic writer does for ConfigMap volumes."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
