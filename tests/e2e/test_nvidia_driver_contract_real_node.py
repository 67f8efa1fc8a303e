"""NVIDIA's driver contract beside our other operands, on a real node: a mixed cluster reaches ready and a
workload gets its GPUs.

The ClusterPolicy names a driver image that is not the operator's, so the driver state runs NVIDIA's
contract (``render.implementations``): the DaemonSet NVIDIA's operator renders -- ``nvidia-driver init``,
NVIDIA's mounts (``/run/nvidia`` Bidirectional, no host root), hostPID, privileged, the startup probe
from the ``nvidia-driver-startup-probe`` ConfigMap, the preStop hook -- and every other operand our agent
in our image (toolkit, validator, device plugin, GFD, exporter, MIG manager). NVIDIA's image cannot be
pulled here; its stand-in is the fake driver image of one version, whose ``nvidia-driver init``
(``sim.fakedriver.standin``) installs the fake driver into its own root, loads it into the node's fake
kernel and exposes the root at ``/run/nvidia/driver``, as NVIDIA's does. Real kubelet, containerd and
runc run all of it; the validator chain agrees on the files both sides write under
``/run/nvidia/validations``; a pod then gets two GPUs through CDI from the driver container's root and
its ``nvidia-smi`` reports the image's version.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Pod

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.sim.fakedriver.build import cached_build
from gpu_operator.sim.fakedriver.image import IMAGE, REPOSITORY, DriverImage, build_driver_image, reference
from gpu_operator.sim.fakedriver.nodes import Shape, attach, node_setup
from gpu_operator.sim.hardware import pci_functions
from tests.chart_checks import policy_state
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import allocatable, driver_version_seen, gpu_pod, pod_log, seen_gpus
from tests.e2e.installs import all_ready, daemonsets, host_os_tag, install_until_ready

JSON = dict[str, Any]
NODE, PROFILE, GPUS = "real-node-1", "dgx-h100", 8
VERSION = "595.91.07"
SHAPE: Shape = "driver-container"


DRIVER_DAEMONSET = f"nvidia-driver-daemonset-{host_os_tag()}"
OURS = (
    "nvidia-gpu-discovery", "nvidia-container-toolkit-daemonset", "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-mig-manager",
)  # fmt: skip


@pytest.fixture(scope="module")
def driver_image(product_image: ProductImage) -> DriverImage:
    output = REPO / "build" / "image" / "fake-nvidia-driver-one-version.oci.tar"
    return build_driver_image(base=product_image.archive, build=cached_build(checkout_root=REPO),
                              versions=(VERSION,), os_tag=host_os_tag(), output=output)  # fmt: skip


@pytest.fixture(scope="module")
def mixed_cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, driver_image: DriverImage
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        binaries=kube_binaries,
        real_nodes=1,
        node_images=[product_image.archive, driver_image.archive],
        node_binaries=node_binaries,
        node_hardware=[pci_functions(PROFILE)],
        node_setups=[node_setup(profile=PROFILE, shape=SHAPE)],
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(mixed_cluster: LocalCluster) -> Iterator[Client]:
    client = mixed_cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def installed(mixed_cluster: LocalCluster, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> float:
    """``helm install`` naming the stand-in driver image and nothing else; seconds until ready."""
    probe = {"initialDelaySeconds": 2, "periodSeconds": 2, "timeoutSeconds": 30, "failureThreshold": 90}
    # No `implementation`: an image that is not the operator's runs NVIDIA's contract, by the rule.
    driver = {"enabled": True, "repository": REPOSITORY, "image": IMAGE, "version": VERSION, "startupProbe": probe}
    seconds = install_until_ready(mixed_cluster, kube, values={"driver": driver}, timeout=300,
                                  workdir=tmp_path_factory.mktemp("values"))  # fmt: skip
    print(f"helm install to ClusterPolicy ready, NVIDIA's driver contract with our other operands: {seconds:.1f} s")
    return seconds


@pytest.mark.timeout(480)  # the first test pays for the cluster's start and the install (up to 300 s)
def test_nvidias_driver_contract_and_our_operands_reach_ready(
    mixed_cluster: LocalCluster, kube: Client, installed: float
) -> None:
    wait_for(lambda: all_ready(kube, names=(DRIVER_DAEMONSET, *OURS), nodes=1), timeout=90,
             describe="every operand Ready on the node")  # fmt: skip
    assert policy_state(kube) == "ready"
    sets = daemonsets(kube)
    implementation = {name: ds["metadata"]["annotations"][keys.IMPLEMENTATION] for name, ds in sets.items()}
    assert implementation[DRIVER_DAEMONSET] == "nvidia"
    assert all(implementation[name] == "agent" for name in OURS), implementation
    pod = sets[DRIVER_DAEMONSET]["spec"]["template"]["spec"]
    (driver,) = [c for c in pod["containers"] if c["name"] == "nvidia-driver-ctr"]
    assert driver["image"] == reference(version=VERSION, os_tag=host_os_tag())
    assert (driver["command"], driver["args"]) == (["nvidia-driver"], ["init"])
    assert pod["hostPID"] is True
    # The driver container mounts no host root, as NVIDIA's (the driver manager's init container does).
    host_root = {v["name"] for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/"}
    assert not host_root & {m["name"] for m in driver["volumeMounts"]}
    assert driver["startupProbe"]["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
    # Our driver manager ran first, as the init container NVIDIA's contract has there.
    assert [c["name"] for c in pod["initContainers"]] == ["k8s-driver-manager"]

    assert mixed_cluster.real_nodes is not None
    real = mixed_cluster.real_nodes.node(NODE)
    assert real.view("/sys/module/nvidia/refcnt").exists()  # loaded into the node's fake kernel
    # The startup probe's file, in NVIDIA's format, which our validator read before the chain went on.
    ready = real.view("/run/nvidia/validations/.driver-ctr-ready").read_text(encoding="utf-8")
    assert "GPU_DIRECT_RDMA_ENABLED=false" in ready
    assert real.view("/run/nvidia/validations/driver-ready").is_file()
    assert real.view("/run/nvidia/validations/toolkit-ready").is_file()
    wait_for(lambda: allocatable(kube, NODE) == str(GPUS), timeout=60, describe="the node's GPUs allocatable")
    assert not Path("/sys/module/nvidia").exists()  # the machine's own kernel never had it


@pytest.mark.timeout(240)
def test_a_gpu_pod_gets_its_gpus_from_nvidias_driver_container(
    mixed_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    assert mixed_cluster.real_nodes is not None
    driver = attach(mixed_cluster.real_nodes.node(NODE), profile=PROFILE, shape=SHAPE, version=VERSION)
    kube.create(codecs.from_dict(gpu_pod("mixed-two", node=NODE, image=product_image.reference, gpus=2)))
    devices, uuids = wait_for(lambda: seen_gpus(mixed_cluster, "mixed-two"), timeout=90, describe="the pod's GPUs")
    assert len(set(uuids)) == 2
    assert set(uuids) <= set(driver.uuids)
    expected = {f"nvidia{driver.minors[driver.uuids.index(u)]}" for u in uuids}
    assert devices == expected, pod_log(mixed_cluster, "mixed-two")
    seen = wait_for(functools.partial(driver_version_seen, mixed_cluster, "mixed-two"), timeout=30,
                    describe="the driver version the pod's nvidia-smi reports")  # fmt: skip
    assert seen == VERSION
    kube.delete(Pod, "mixed-two", namespace="default", grace_period=0)
