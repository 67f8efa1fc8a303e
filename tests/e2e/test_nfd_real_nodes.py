"""The operator beside a real Node Feature Discovery, on real nodes (the other real-node tests run without NFD).

NFD v0.18 (built from the Go module proxy by hack/build-nfd.sh, its own chart from the same module) runs
on real-node-1, a 2-GPU A100 host with the fake driver on the host, and real-node-2, a CPU-only node.
NFD's worker reads each node's PCI tree and labels the A100 node ``pci-0302_10de.present``; the chart
installed with ``nfd.enabled=true`` then brings the ClusterPolicy to ready with no discovery agent of
its own: the GPU node is found through NFD's labels, the CPU node gets no operand, and the labels GFD
computes reach the node through NFD (its feature file, applied by nfd-master), their one writer.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.images import NFD_IMAGE_REPOSITORY, build_nfd_image
from gpu_operator.localcluster.nodes.spec import NodeSetup
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.fakedriver.nodes import node_setup
from gpu_operator.sim.hardware import pci_functions
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import allocatable
from tests.e2e.installs import NAMESPACE, install_until_ready

JSON = dict[str, Any]
NFD_NAMESPACE = "node-feature-discovery"
NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-0302_10de.present"
GPU_NODE, CPU_NODE = "real-node-1", "real-node-2"


def _nfd_version() -> str:
    text = (REPO / "hack" / "nfd" / "go.mod").read_text(encoding="utf-8")
    return next(line.split()[2] for line in text.splitlines() if line.startswith("require sigs.k8s.io/node-feature"))


@pytest.fixture(scope="module")
def nfd() -> tuple[Path, str, Path]:
    """(NFD's build directory, its image reference, the image archive), built or reused."""
    built = subprocess.run(["bash", str(REPO / "hack" / "build-nfd.sh")], capture_output=True, text=True,
                           timeout=1800, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    nfd_dir = Path(built.stdout.strip().splitlines()[-1])
    version = _nfd_version()
    archive = REPO / "build" / "image" / f"nfd-{version}.oci.tar"
    return nfd_dir, build_nfd_image(nfd_dir=nfd_dir, version=version, output=archive), archive


@pytest.fixture(scope="module")
def nfd_cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, nfd: tuple[Path, str, Path]
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        binaries=kube_binaries,
        real_nodes=2,
        node_images=[product_image.archive, nfd[2]],
        node_binaries=node_binaries,
        node_hardware=[pci_functions("a100-mig"), pci_functions("cpu-only")],
        node_setups=[node_setup(profile="a100-mig"), NodeSetup()],
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(nfd_cluster: LocalCluster) -> Iterator[Client]:
    client = nfd_cluster.client()
    yield client
    client.close()


def _labels(kube: Client, node: str) -> dict[str, str]:
    return dict(kube.get(Node, node).metadata.labels or {})  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def nfd_installed(
    nfd_cluster: LocalCluster, kube: Client, nfd: tuple[Path, str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """NFD's own chart, its image ours, nvidia.com labels allowed (GFD's), no garbage collector."""
    nfd_dir, reference, _ = nfd
    nfd_cluster.kubectl("create", "namespace", NFD_NAMESPACE)
    # Its worker mounts host paths: the namespace's Pod Security level must allow that.
    nfd_cluster.kubectl("label", "namespace", NFD_NAMESPACE, "pod-security.kubernetes.io/enforce=privileged")
    repository, tag = reference.rsplit(":", 1)
    values: JSON = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "gc": {"enable": False},
        "master": {"config": {"extraLabelNs": ["nvidia.com"]}},
    }
    path = tmp_path_factory.mktemp("nfd") / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    assert repository == NFD_IMAGE_REPOSITORY
    nfd_cluster.helm("install", "nfd", str(nfd_dir / "chart"), "-n", NFD_NAMESPACE, "-f", str(path),
                     "--wait", "--timeout", "180s", timeout=210)  # fmt: skip
    wait_for(lambda: _labels(kube, GPU_NODE).get(NFD_GPU_LABEL) == "true", timeout=120,
             describe="NFD's PCI label on the GPU node")  # fmt: skip


@pytest.fixture(scope="module")
def installed(
    nfd_cluster: LocalCluster, kube: Client, nfd_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> float:
    values = {"driver": {"enabled": False}, "nfd": {"enabled": True}}
    return install_until_ready(nfd_cluster, kube, values=values, workdir=tmp_path_factory.mktemp("values"))


@pytest.mark.timeout(600)
def test_with_nfd_the_gpu_node_is_found_through_its_labels_and_gfd_reports_through_nfd(
    kube: Client, installed: float
) -> None:
    print(f"helm install to ClusterPolicy ready beside NFD: {installed:.1f} s")
    gpu, cpu = _labels(kube, GPU_NODE), _labels(kube, CPU_NODE)
    assert NFD_GPU_LABEL not in cpu
    assert gpu["feature.node.kubernetes.io/system-os_release.ID"]  # NFD's OS labels, for a driver tag
    sets = {str(d.metadata.name): d for d in kube.list(DaemonSet, namespace=NAMESPACE)}  # type: ignore[union-attr]
    assert "nvidia-gpu-discovery" not in sets  # NFD finds the GPUs: no agent of ours does
    for name in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-operator-validator"):
        status = sets[name].status
        assert status is not None
        assert (status.desiredNumberScheduled, status.numberReady) == (1, 1), name  # the GPU node only
    assert gpu["nvidia.com/gpu.present"] == "true"
    assert cpu.get("nvidia.com/gpu.present") != "true"
    wait_for(lambda: allocatable(kube, GPU_NODE) == "2", timeout=30, describe="the A100s allocatable")
    # GFD's labels arrive through NFD: nfd-master applied them from GFD's feature file and owns them.
    wait_for(lambda: _labels(kube, GPU_NODE).get("nvidia.com/gpu.product") == "NVIDIA-A100-SXM4-40GB", timeout=120,
             describe="GFD's product label, through NFD")  # fmt: skip
    annotations = kube.get(Node, GPU_NODE).metadata.annotations or {}  # type: ignore[union-attr]
    assert "nvidia.com/gpu.product" in annotations.get("nfd.node.kubernetes.io/feature-labels", "")
