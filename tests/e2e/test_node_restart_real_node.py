"""A pod deleted after its node's containerd and kubelet restarted is terminated, and a new pod starts.

What a driver upgrade does to a node: the toolkit restarts containerd, the node's kubelet may restart,
then the upgrade evicts the node's GPU workloads. One real kubelet node, a workload pod Running (the
operator's image, the command of ``gpu_pods``), then both restarts:

* containerd then the kubelet, each once the other is back (``RealNode.restart_containerd`` waits for
  the new containerd);
* the kubelet then containerd at once: the new kubelet starts while containerd is down, and a kubelet
  that cannot reach the CRI socket at start exits (``validate CRI v1 runtime API ... no such file or
  directory``). On a real host systemd starts it again (``Restart=always``); the node's watcher does the
  same. Before it did, the pod stayed Terminating, still Ready, for good: no kubelet was left to stop it.

Then the pod is deleted: it must be gone within ``GONE_WITHIN_S`` (it has a 1 s grace period; the kubelet's
restart delay and its first sync come on top), and a new pod on the node must reach Running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from lightkube import ApiError, Client, codecs
from lightkube.resources.core_v1 import Pod

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.waiting import wait_for
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import gpu_pod

NODE = "real-node-1"
#: A deleted pod's 1 s grace period, the watcher's 1 s kubelet restart delay and the new kubelet's start.
GONE_WITHIN_S = 30.0
RUNNING_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage
) -> Iterator[LocalCluster]:
    with LocalCluster(
        binaries=kube_binaries, real_nodes=1, node_images=[product_image.archive], node_binaries=node_binaries
    ) as started:
        yield started


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[Client]:
    client = cluster.client(namespace="default")
    yield client
    client.close()


def _phase(kube: Client, name: str) -> str | None:
    try:
        status = kube.get(Pod, name).status
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    return status.phase if status else None


def _gone(kube: Client, name: str) -> bool:
    try:
        kube.get(Pod, name)
    except ApiError as error:
        if error.status.code == 404:
            return True
        raise
    return False


def _start_pod(kube: Client, name: str, image: str) -> None:
    pod = gpu_pod(name, node=NODE, image=image)
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    kube.create(codecs.from_dict(pod))
    wait_for(lambda: _phase(kube, name) == "Running", timeout=RUNNING_WITHIN_S, describe=f"{name} Running")


def _containerd_then_kubelet(node: RealNode) -> None:
    node.restart_containerd()
    node.restart_kubelet()


def _kubelet_then_containerd(node: RealNode) -> None:
    node.restart_kubelet()
    node.restart_containerd()  # at once: the new kubelet starts while containerd is down


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "restart", [_containerd_then_kubelet, _kubelet_then_containerd], ids=["containerd-kubelet", "kubelet-containerd"]
)
def test_a_pod_deleted_after_containerd_and_kubelet_restarts_goes_and_a_new_one_runs(
    cluster: LocalCluster, kube: Client, product_image: ProductImage, restart: Callable[[RealNode], None]
) -> None:
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node(NODE)
    name = restart.__name__.strip("_").replace("_", "-")
    _start_pod(kube, name, product_image.reference)

    restart(node)
    kube.delete(Pod, name)
    deleted = time.monotonic()
    wait_for(lambda: _gone(kube, name), timeout=GONE_WITHIN_S, describe=f"{name} gone after its deletion")
    gone = time.monotonic() - deleted

    _start_pod(kube, f"{name}-after", product_image.reference)
    running = time.monotonic() - deleted - gone
    print(f"{name}: gone {gone:.1f} s after its deletion; the next pod Running {running:.1f} s later; "
          f"the kubelet exited and was started again {node.kubelet_restarts} time(s) so far")  # fmt: skip
    assert node.is_running()
    kube.delete(Pod, f"{name}-after")
