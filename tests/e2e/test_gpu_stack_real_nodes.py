"""The whole GPU stack on two real nodes with the fake NVIDIA driver: installed by the chart, used by pods.

real-node-1 is an 8-GPU DGX H100 and real-node-2 a 2-GPU A100 host, each with the fake driver installed
on the host (``sim.fakedriver``: fake ``libnvidia-ml``, ``libcuda`` and ``nvidia-smi``, mknod'd device
nodes, seen by that node only through its overlays) and a PCI tree showing its GPUs. There is no NFD.
``helm install`` with the chart's defaults (the driver container off: the driver is on the host) brings
the ClusterPolicy to ``ready`` with every default operand a real container under containerd: GPU
discovery, toolkit (which edits the node's containerd config and makes it restart), validator (driver,
toolkit, CUDA and plugin checks in their own containers), device plugin, GFD, exporter, MIG manager.
real-node-2 registers with the startup taint an autoscaled node group would give it (our extension
``startupTaint``, on in the values): every operand runs there anyway, and the operator lifts the taint once
the node's validator pod is Ready.

Then, on the real kubelet and containerd: a pod asking for 2 ``nvidia.com/gpu`` gets exactly its 2
device nodes and the driver's files through CDI and the fake ``nvidia-smi`` in it lists exactly those 2
GPUs; a pod of the ``nvidia`` RuntimeClass naming 2 GPUs in ``NVIDIA_VISIBLE_DEVICES`` gets them through
the toolkit's runtime; a real Prometheus scrapes both exporters at their pods' addresses; an XID 79
written into the host's fake driver takes the GPU out of the Node's allocatable and its recovery brings
it back; a containerd restart leaves every operand and the workloads running; and with the driver broken
on the host (its NVML library gone, or ``/dev/nvidiactl``), ``gpu-operator status`` names the step the node
waits on, in the validator's own words, until the driver is repaired; a MIG switch on the A100 node
(the MIG manager, a GPU reset through the fake ``nvidia-smi``, the plugin re-advertising) reaches a pod;
and a plugin config sharing the GPUs through MPS brings up the MPS control daemon and 4 replicas per
GPU, whose pods reach that daemon.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event, Node, Pod

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.keys import STARTUP_TAINT
from gpu_operator.reconcile.startuptaint import EVENT_REASON
from gpu_operator.sim.fakedriver.install import FakeDriver
from gpu_operator.sim.fakedriver.nodes import attach, node_setup
from gpu_operator.sim.hardware import pci_functions
from tests.chart_checks import policy_state
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import allocatable, gpu_pod, seen_gpus
from tests.e2e.installs import NAMESPACE, all_ready, daemonsets, install_until_ready
from tests.prometheus import Prometheus
from tests.unit import gfd_expected

JSON = dict[str, Any]
PROFILES = {"real-node-1": "dgx-h100", "real-node-2": "a100-mig"}
GPUS = {"real-node-1": 8, "real-node-2": 2}
#: The DaemonSets of the default ClusterPolicy with the driver on the host (no NFD, no MPS config).
DEFAULT_OPERANDS = {
    "nvidia-gpu-discovery", "nvidia-container-toolkit-daemonset", "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-mig-manager",
}  # fmt: skip
EXPORTER_PORT = 9400
#: real-node-2 registers as an autoscaled node group's would: held by the startup taint until validated.
STARTUP_TAINTS = {"real-node-2": ({"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"},)}


@pytest.fixture(scope="module")
def gpu_cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        binaries=kube_binaries,
        real_nodes=len(PROFILES),
        node_images=[product_image.archive],
        node_binaries=node_binaries,
        node_hardware=[pci_functions(p) for p in PROFILES.values()],
        node_setups=[
            dataclasses.replace(node_setup(profile=p), register_with_taints=STARTUP_TAINTS.get(n, ()))
            for n, p in PROFILES.items()
        ],
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(gpu_cluster: LocalCluster) -> Iterator[Client]:
    client = gpu_cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def drivers(gpu_cluster: LocalCluster) -> dict[str, FakeDriver]:
    assert gpu_cluster.real_nodes is not None
    return {name: attach(gpu_cluster.real_nodes.node(name), profile=p) for name, p in PROFILES.items()}


@pytest.fixture(scope="module")
def installed(gpu_cluster: LocalCluster, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> float:
    """``helm install`` with the defaults (the driver on the host); seconds until the policy is ready."""
    values = {"driver": {"enabled": False}, "startupTaint": {"enabled": True}}
    seconds = install_until_ready(gpu_cluster, kube, values=values, workdir=tmp_path_factory.mktemp("values"))
    print(f"helm install to ClusterPolicy ready on {len(PROFILES)} fake-driver nodes: {seconds:.1f} s")
    return seconds


def _all_ready(kube: Client) -> bool:
    return all_ready(kube, names=DEFAULT_OPERANDS, nodes=len(PROFILES))


def _has_gpus(kube: Client, node: str, count: int) -> bool:
    return allocatable(kube, node) == str(count)


def _minor_of(driver: FakeDriver, uuid: str) -> int:
    return driver.minors[driver.uuids.index(uuid)]


def test_default_policy_is_ready_with_every_operand_a_real_container(
    gpu_cluster: LocalCluster, kube: Client, installed: float
) -> None:
    wait_for(lambda: _all_ready(kube), timeout=60, describe="every default operand Ready on both nodes")
    assert set(daemonsets(kube)) >= DEFAULT_OPERANDS
    for pod in kube.list(Pod, namespace=NAMESPACE):
        data: JSON = pod.to_dict()
        for status in data["status"].get("containerStatuses", []):
            assert status["containerID"].startswith("containerd://"), data["metadata"]["name"]
            assert status["ready"] is True, data["metadata"]["name"]
    for node, count in GPUS.items():
        wait_for(functools.partial(_has_gpus, kube, node, count), timeout=30, describe=f"{node}'s GPUs allocatable")
        labels = kube.get(Node, node).metadata.labels or {}  # type: ignore[union-attr]
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.count"] == str(count)  # GFD, from the fake driver through NVML
        assert labels["nvidia.com/gpu.product"] == ("NVIDIA-H100-80GB-HBM3" if count == 8 else "NVIDIA-A100-SXM4-40GB")
        assert labels["nvidia.com/gpu.mode"] == "compute"  # GFD, from the fake GPUs' PCI class through NVML
    # The fake driver lives in the nodes' overlays: the machine's own /dev never had it.
    assert not Path("/dev/nvidiactl").exists()


@pytest.mark.timeout(300)
def test_gpu_pods_get_exactly_their_gpus_through_cdi_and_the_runtime_class(
    gpu_cluster: LocalCluster,
    kube: Client,
    installed: float,
    drivers: dict[str, FakeDriver],
    product_image: ProductImage,
) -> None:
    driver = drivers["real-node-1"]
    kube.create(codecs.from_dict(gpu_pod("cdi-two", node="real-node-1", image=product_image.reference, gpus=2)))
    devices, uuids = wait_for(lambda: seen_gpus(gpu_cluster, "cdi-two"), timeout=90, describe="the CDI pod's GPUs")
    assert len(set(uuids)) == len(uuids) == 2
    assert set(uuids) <= set(driver.uuids)
    assert devices == {f"nvidia{_minor_of(driver, u)}" for u in uuids}  # its own 2 device nodes, no others

    # The runtime class: the toolkit's runtime turns NVIDIA_VISIBLE_DEVICES into CDI devices.
    pod = gpu_pod("rc-two", node="real-node-1", image=product_image.reference, runtime_class="nvidia",
               env={"NVIDIA_VISIBLE_DEVICES": "2,5"})  # fmt: skip
    kube.create(codecs.from_dict(pod))
    devices, uuids = wait_for(
        lambda: seen_gpus(gpu_cluster, "rc-two"), timeout=90, describe="the runtime-class pod's GPUs"
    )
    assert devices == {"nvidia2", "nvidia5"}
    assert uuids == [driver.uuids[driver.minors.index(2)], driver.uuids[driver.minors.index(5)]]


@pytest.mark.timeout(300)
def test_prometheus_scrapes_both_exporters_at_their_pod_addresses(
    kube: Client, installed: float, tmp_path: Path
) -> None:
    pods = [p.to_dict() for p in kube.list(Pod, namespace=NAMESPACE, labels={"app": "nvidia-dcgm-exporter"})]
    targets = [f"{p['status']['podIP']}:{EXPORTER_PORT}" for p in pods]
    assert len(targets) == len(PROFILES)
    prometheus = Prometheus(targets=targets, workdir=tmp_path)
    try:
        series = prometheus.wait("DCGM_FI_DEV_GPU_UTIL", count=sum(GPUS.values()), timeout=60)
        # GPM profiling through the image's NVML calls: the H100s (Hopper) give it from the exporter's
        # second collection on; the A100s (Ampere) cannot, so that node has no such series.
        gpm = prometheus.wait("DCGM_FI_PROF_GR_ENGINE_ACTIVE", count=GPUS["real-node-1"], timeout=90)
    finally:
        prometheus.close()
    by_host = {s["metric"].get("Hostname") for s in series}
    assert by_host == set(PROFILES), series[:2]
    assert {s["metric"].get("Hostname") for s in gpm} == {"real-node-1"}


@pytest.mark.timeout(180)
def test_an_xid_on_the_host_takes_the_gpu_out_of_allocatable_until_it_recovers(
    kube: Client, installed: float, drivers: dict[str, FakeDriver]
) -> None:
    driver = drivers["real-node-2"]
    wait_for(lambda: allocatable(kube, "real-node-2") == "2", timeout=30, describe="both A100s allocatable")
    began = time.monotonic()
    driver.inject_xid(uuid=driver.uuids[1], xid=79)
    wait_for(lambda: allocatable(kube, "real-node-2") == "1", timeout=60, describe="the lost GPU gone")
    lost = time.monotonic() - began
    driver.recover(uuid=driver.uuids[1])
    wait_for(lambda: allocatable(kube, "real-node-2") == "2", timeout=60, describe="the GPU back")
    print(f"XID 79 to allocatable 1: {lost:.1f} s; recovery to 2: {time.monotonic() - began - lost:.1f} s")


@pytest.mark.timeout(300)
def test_a_containerd_restart_leaves_the_operands_and_workloads_running(
    gpu_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    assert gpu_cluster.real_nodes is not None
    node = gpu_cluster.real_nodes.node("real-node-1")
    before = {str(p.metadata.name): p.to_dict()["status"]["containerStatuses"][0]["containerID"]  # type: ignore[union-attr]
              for p in kube.list(Pod, namespace=NAMESPACE) if p.spec and p.spec.nodeName == "real-node-1"}  # fmt: skip
    node.restart_containerd()
    wait_for(lambda: _all_ready(kube), timeout=120, describe="every operand Ready after the restart")
    wait_for(lambda: policy_state(kube) == "ready", timeout=120, describe="the policy ready after the restart")
    after = {str(p.metadata.name): p.to_dict()["status"]["containerStatuses"][0]["containerID"]  # type: ignore[union-attr]
             for p in kube.list(Pod, namespace=NAMESPACE) if p.spec and p.spec.nodeName == "real-node-1"}  # fmt: skip
    assert after == before  # the same containers: a runtime restart does not restart what it runs
    kube.create(codecs.from_dict(gpu_pod("after-restart", node="real-node-1", image=product_image.reference, gpus=1)))
    _, uuids = wait_for(lambda: seen_gpus(gpu_cluster, "after-restart"), timeout=90, describe="a new GPU pod")
    assert len(uuids) == 1


def _stamp(value: Any) -> float:
    """Seconds of an API timestamp (a string, or the datetime lightkube may decode it to)."""
    if not isinstance(value, str):
        return float(value.timestamp())
    return float(calendar.timegm(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")))


def test_the_startup_taint_is_lifted_from_the_tainted_node_once_its_validator_is_ready(
    kube: Client, installed: float
) -> None:
    """real-node-2 registered with the startup taint: every operand ran there anyway (they tolerate it),
    and the operator lifted the taint only once the node's validator pod was Ready; real-node-1 never had it."""
    wait_for(lambda: _all_ready(kube), timeout=60, describe="every default operand Ready on both nodes")
    for node in PROFILES:
        wait_for(functools.partial(_untainted, kube, node), timeout=60, describe=f"{node} without the startup taint")
    events = [e.to_dict() for e in kube.list(Event, namespace="default", fields={"reason": EVENT_REASON})]
    assert sorted(e["involvedObject"]["name"] for e in events) == ["real-node-2"]
    (event,) = events
    lifted = _stamp(event["firstTimestamp"])
    (validator,) = [
        p.to_dict()
        for p in kube.list(Pod, namespace=NAMESPACE, labels={"app": "nvidia-operator-validator"})
        if p.spec is not None and p.spec.nodeName == "real-node-2"
    ]
    ready = next(c for c in validator["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert _stamp(ready["lastTransitionTime"]) <= lifted, (ready, event)


def _untainted(kube: Client, node: str) -> bool:
    taints = (kube.get(Node, node).to_dict().get("spec") or {}).get("taints") or []
    return all(t["key"] != STARTUP_TAINT for t in taints)


def _status(cluster: LocalCluster, *args: str) -> str:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "gpu-operator"), "status", "--kubeconfig", str(cluster.kubeconfig_path),
         *args],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def _restart_validator(kube: Client, node: str) -> None:
    """Delete the node's validator pod, as a reboot would restart it: its checks run again."""
    for pod in kube.list(Pod, namespace=NAMESPACE, labels={"app": "nvidia-operator-validator"}):
        if pod.spec and pod.spec.nodeName == node:
            kube.delete(Pod, str(pod.metadata.name), namespace=NAMESPACE)  # type: ignore[union-attr]


@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    ("fault", "words"),
    [("library", "NVML Shared Library Not Found"), ("device-node", "Driver Not Loaded")],
)
def test_status_names_the_blocking_step_when_the_fake_driver_is_broken(
    gpu_cluster: LocalCluster, kube: Client, installed: float, drivers: dict[str, FakeDriver], fault: str, words: str
) -> None:
    driver = drivers["real-node-2"]
    if fault == "library":
        driver.break_library()
    else:
        driver.remove_device_node("nvidiactl")
    _restart_validator(kube, "real-node-2")

    def blocked() -> str | None:
        reports = {r["node"]: r for r in json.loads(_status(gpu_cluster, "-o", "json"))["nodes"]}
        blocking = str(reports["real-node-2"]["blocking"])
        named = blocking.startswith("validation: init container driver-validation") and words in blocking
        return blocking if named else None

    try:
        blocking = wait_for(blocked, timeout=120, interval=2.0, describe=f"status naming the broken driver ({fault})")
        print(f"gpu-operator status, {fault} broken: {blocking}")
        chain = _status(gpu_cluster, "--node", "real-node-2")
        assert "disabled in the ClusterPolicy (the driver is on the host)" in chain  # not "no driver pod"
        reports = {r["node"]: r for r in json.loads(_status(gpu_cluster, "-o", "json"))["nodes"]}
        assert reports["real-node-1"]["ready"] is True
    finally:
        if fault == "library":
            driver.repair_library()
        else:
            driver.restore_device_nodes()
    wait_for(lambda: policy_state(kube) == "ready", timeout=180, describe="the policy ready once the driver is fixed")


def _mig_state(kube: Client, node: str) -> str:
    labels = kube.get(Node, node).metadata.labels or {}  # type: ignore[union-attr]
    return str(labels.get("nvidia.com/mig.config.state", ""))


@pytest.mark.timeout(420)
def test_a_mig_switch_on_the_a100_node_reaches_its_pods(
    gpu_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    # The MIG manager enables MIG (the fake driver needs a GPU reset: `nvidia-smi -r` in the host root),
    # creates seven 1g.5gb devices per GPU and the plugin, under the default "single" strategy,
    # advertises the 14 as nvidia.com/gpu; a pod given one gets its GPU and that instance's two caps.
    began = time.monotonic()
    gpu_cluster.kubectl("label", "node", "real-node-2", "nvidia.com/mig.config=all-1g.5gb", "--overwrite")
    wait_for(lambda: _mig_state(kube, "real-node-2") == "success" and _has_gpus(kube, "real-node-2", 14),
             timeout=240, interval=1.0, describe="all-1g.5gb applied and 14 MIG devices allocatable")  # fmt: skip
    print(f"MIG switch to all-1g.5gb, label to 14 allocatable: {time.monotonic() - began:.1f} s")
    labels = kube.get(Node, "real-node-2").metadata.labels or {}  # type: ignore[union-attr]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"  # GFD, from the new geometry
    # What the image's GFD reads from each MIG device through NVML (nvmlDeviceGetAttributes_v2), as upstream.
    mig_keys = ["mig.strategy", "gpu.multiprocessors", "gpu.slices.gi", "gpu.slices.ci"]
    mig_keys += [f"gpu.engines.{e}" for e in ("copy", "decoder", "encoder", "jpeg", "ofa")]
    for key in (f"nvidia.com/{k}" for k in mig_keys):
        assert labels.get(key) == gfd_expected.A100_SINGLE[key], key

    pod = gpu_pod("mig-one", node="real-node-2", image=product_image.reference, gpus=1)
    # (The newline matters: the runtime's log keeps a partial line back.)
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "ls /dev /dev/nvidia-caps | tr '\\n' ' '; echo; sleep 3600"]
    kube.create(codecs.from_dict(pod))

    def caps() -> list[str] | None:
        logs = gpu_cluster.kubectl("logs", "-n", "default", "mig-one", check=False).stdout
        return [w for w in logs.split() if re.fullmatch(r"nvidia-cap\d+", w)] or None

    assert len(wait_for(caps, timeout=90, describe="the MIG pod's device nodes")) == 2  # its GI and its CI

    kube.delete(Pod, "mig-one", namespace="default", grace_period=0)
    gpu_cluster.kubectl("label", "node", "real-node-2", "nvidia.com/mig.config=all-disabled", "--overwrite")
    wait_for(lambda: _mig_state(kube, "real-node-2") == "success" and _has_gpus(kube, "real-node-2", 2),
             timeout=240, interval=1.0, describe="MIG off again and both whole GPUs allocatable")  # fmt: skip


MPS_CONFIGS = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "plugin-configs", "namespace": NAMESPACE},
    "data": {"mps-4": "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"},
}


@pytest.mark.timeout(480)
def test_mps_replicas_work_end_to_end(
    gpu_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    # The plugin config shares every GPU through MPS in 4 replicas: GFD marks the nodes mps.capable,
    # the MPS control daemon starts the driver's daemon, the plugin then advertises 4 replicas per GPU,
    # and a pod's MPS client reaches that daemon and reads its quarter share.
    kube.create(codecs.from_dict(MPS_CONFIGS))
    patch = '{"spec":{"devicePlugin":{"config":{"name":"plugin-configs","default":"mps-4"}}}}'
    began = time.monotonic()
    gpu_cluster.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", patch)
    wait_for(functools.partial(_has_gpus, kube, "real-node-1", 32), timeout=300, interval=1.0,
             describe="32 MPS replicas of the 8 H100s allocatable")  # fmt: skip
    print(f"MPS config to 32 replicas allocatable: {time.monotonic() - began:.1f} s")
    labels = kube.get(Node, "real-node-1").metadata.labels or {}  # type: ignore[union-attr]
    assert labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/gpu.replicas"] == "4"

    pod = gpu_pod("mps-client", node="real-node-1", image=product_image.reference, gpus=1)
    ask = "echo get_default_active_thread_percentage | nvidia-cuda-mps-control; echo done; sleep 3600"
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", ask]
    kube.create(codecs.from_dict(pod))

    def answer() -> str | None:
        logs = gpu_cluster.kubectl("logs", "-n", "default", "mps-client", check=False).stdout.split()
        return logs[0] if "done" in logs else None

    assert wait_for(answer, timeout=90, describe="the MPS client's answer") == "25.0"
