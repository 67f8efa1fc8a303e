"""GPUDirect RDMA on a real node: the driver pod's ``nvidia-peermem-ctr`` loads nvidia-peermem once MOFED is there.

real-node-1 (8 H100s) has the ``driver-container`` shape of ``test_driver_container_real_nodes``: fake
GPUs, a fake kernel (its own ``/sys/module``) and nothing of a driver. The ClusterPolicy names the fake
driver image with ``driver.rdma.enabled=true``, so the driver pod has the side-car
``nvidia-peermem-ctr`` (``gpu-operator agent nvidia-peermem``) beside the driver container. The node
has no Network Operator: the test plays MOFED's part on the node itself, as its OFED container would.

1. No RDMA stack (no ``mlx5_core`` in the node's kernel): the side-car is Ready (nothing to join, a GPU
   node without NICs must not hold its driver back), and nvidia-peermem is not loaded.
2. MOFED loads ``mlx5_core`` but has not written ``/run/mellanox/drivers/.driver-ready``: the side-car
   runs, not Ready, and still does not load the module.
3. MOFED writes ``.driver-ready`` in the node's ``/run/mellanox/drivers`` (private to the node, as
   ``/run/nvidia`` is): the side-car loads nvidia-peermem through the driver's exposed root
   (``chroot /run/nvidia/driver modprobe nvidia-peermem``, the fake driver image's modprobe, which
   "loads" it into the node's fake kernel) and turns Ready.
4. A MOFED reload takes the module away: the side-car loads it again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from gpu_operator.agents.drivermanager.driver import CTR_READY
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.network import DRIVER_READY
from gpu_operator.sim.fakedriver.build import cached_build
from gpu_operator.sim.fakedriver.container import load_module, unload_module
from gpu_operator.sim.fakedriver.image import IMAGE, REPOSITORY, DriverImage, build_driver_image
from gpu_operator.sim.fakedriver.nodes import node_setup
from gpu_operator.sim.hardware import pci_functions
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage
from tests.e2e.installs import NAMESPACE, host_os_tag, install_until_ready

JSON = dict[str, Any]
NODE, PROFILE = "real-node-1", "dgx-h100"
VERSION = "580.95.05"
DRIVER_DAEMONSET = f"nvidia-driver-daemonset-{host_os_tag()}"
SIDECAR = "nvidia-peermem-ctr"
PEERMEM = "/sys/module/nvidia_peermem/refcnt"


@pytest.fixture(scope="module")
def driver_image(product_image: ProductImage) -> DriverImage:
    # An archive of its own: the driver-container module builds its two-version image at the usual name.
    output = REPO / "build" / "image" / "fake-nvidia-driver-peermem.oci.tar"
    return build_driver_image(base=product_image.archive, build=cached_build(checkout_root=REPO),
                              versions=(VERSION,), os_tag=host_os_tag(), output=output)  # fmt: skip


@pytest.fixture(scope="module")
def rdma_cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, driver_image: DriverImage
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        binaries=kube_binaries,
        real_nodes=1,
        node_images=[product_image.archive, driver_image.archive],
        node_binaries=node_binaries,
        node_hardware=[pci_functions(PROFILE)],
        node_setups=[node_setup(profile=PROFILE, shape="driver-container")],
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(rdma_cluster: LocalCluster) -> Iterator[Client]:
    client = rdma_cluster.client()
    yield client
    client.close()


def _driver_pod(kube: Client) -> JSON | None:
    for pod in kube.list(Pod, namespace=NAMESPACE, labels={"app": DRIVER_DAEMONSET}):
        if pod.spec and pod.spec.nodeName == NODE and pod.metadata and not pod.metadata.deletionTimestamp:
            return pod.to_dict()
    return None


def _sidecar(kube: Client) -> tuple[bool, bool, int]:
    """(running, ready, restarts) of the driver pod's nvidia-peermem-ctr."""
    pod = _driver_pod(kube)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s["name"] == SIDECAR), None)
    if status is None:
        return False, False, 0
    return "running" in (status.get("state") or {}), bool(status.get("ready")), int(status.get("restartCount", 0))


def _sidecar_log(cluster: LocalCluster, kube: Client) -> str:
    pod = _driver_pod(kube)
    if pod is None:
        return "(no driver pod)"
    name = pod["metadata"]["name"]
    result = cluster.kubectl("logs", "-n", NAMESPACE, name, "-c", SIDECAR, "--tail", "40", check=False)
    return f"{SIDECAR} of {name}:\n{result.stdout}{result.stderr}"


def _loaded(node: RealNode) -> bool:
    return node.view(PEERMEM).exists()


@pytest.mark.timeout(600)  # the cluster's start, the fake driver image and the install (up to 300 s)
def test_nvidia_peermem_ctr_loads_the_module_once_mofed_is_ready(
    rdma_cluster: LocalCluster, kube: Client, tmp_path_factory: pytest.TempPathFactory
) -> None:
    probe = {"initialDelaySeconds": 2, "periodSeconds": 2, "timeoutSeconds": 30, "failureThreshold": 90}
    driver = {"enabled": True, "repository": REPOSITORY, "image": IMAGE, "version": VERSION, "startupProbe": probe,
              "implementation": "agent", "rdma": {"enabled": True}}  # fmt: skip
    seconds = install_until_ready(rdma_cluster, kube, values={"driver": driver}, timeout=300,
                                  workdir=tmp_path_factory.mktemp("values"))  # fmt: skip
    print(f"helm install with driver.rdma.enabled to ClusterPolicy ready: {seconds:.1f} s")
    assert rdma_cluster.real_nodes is not None
    node = rdma_cluster.real_nodes.node(NODE)
    pod = _driver_pod(kube)
    assert pod is not None
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == SIDECAR)
    assert sidecar["command"] == ["gpu-operator", "agent", "nvidia-peermem"]
    assert node.view(CTR_READY).is_file()  # the driver container is done: only MOFED is missing

    # 1. No RDMA stack on the node: Ready without the module.
    wait_for(lambda: _sidecar(kube)[:2] == (True, True), timeout=30,
             describe=f"{SIDECAR} Ready on a node without mlx5_core")  # fmt: skip
    assert not _loaded(node), _sidecar_log(rdma_cluster, kube)

    # 2. MOFED loaded mlx5_core, .driver-ready not yet written: running, not Ready, nothing loaded.
    load_module(host_root=node.view("/"), module="mlx5_core")
    wait_for(lambda: _sidecar(kube)[:2] == (True, False), timeout=30,
             describe=f"{SIDECAR} running but not Ready while MOFED is not ready")  # fmt: skip
    time.sleep(5)  # a few more of the agent's 2 s rounds: still waiting
    assert _sidecar(kube)[:2] == (True, False), _sidecar_log(rdma_cluster, kube)
    assert not _loaded(node), _sidecar_log(rdma_cluster, kube)

    # 3. MOFED's .driver-ready in the node's own /run/mellanox/drivers: loaded, Ready.
    ready_file = node.view(DRIVER_READY)
    assert ready_file.parent.is_dir()  # the hostPath the kubelet created for the side-car, in the node
    began = time.monotonic()
    ready_file.write_text("", encoding="utf-8")
    wait_for(lambda: _loaded(node), timeout=30, describe="nvidia_peermem in the node's fake kernel")
    loaded_after = time.monotonic() - began
    wait_for(lambda: _sidecar(kube)[:2] == (True, True), timeout=30, describe=f"{SIDECAR} Ready")
    print(f"MOFED ready to nvidia_peermem loaded: {loaded_after:.1f} s; "
          f"to {SIDECAR} Ready: {time.monotonic() - began:.1f} s")  # fmt: skip
    assert "nvidia-peermem loaded" in _sidecar_log(rdma_cluster, kube)
    assert _sidecar(kube)[2] == 0, _sidecar_log(rdma_cluster, kube)  # never restarted on the way

    # 4. A MOFED reload unloads it: loaded again.
    unload_module(host_root=node.view("/"), module="nvidia-peermem")
    wait_for(lambda: _loaded(node), timeout=30, describe="nvidia_peermem loaded again after a MOFED reload")

    # The machine's own kernel and /run/mellanox never saw any of it.
    assert not Path(PEERMEM).exists()
    assert not Path(DRIVER_READY).exists()
