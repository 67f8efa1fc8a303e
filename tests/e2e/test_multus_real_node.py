"""Secondary networks on a real node: our multus agent, macvlan and host-device, host-local addresses.

One real kubelet node (containerd, runc, Debian's CNI plugins). The test renders the NicClusterPolicy
``secondaryNetwork.multus`` state with this operator's image in-process (no network operator runs) and
applies its objects: the agent (``gpu-operator agent multus``) installs the shim in the node's own
``/opt/cni/bin`` and a conf wrapping the node's bridge network. On the host, two veth pairs with
names of this run: one end of the first is the macvlan master, one end of the second is what the
host-device network moves into the pod. A busybox pod annotated ``macvlan-a, hostdev-a``:

1. gets ``net1`` (macvlan, 192.0.2.x) and ``net2`` (the veth end, 198.51.100.x) besides ``eth0`` (what
   ``ip addr`` in the pod shows), and its ``network-status`` annotation lists all three;
2. deleted, gives both addresses back (host-local's files in the node's ``/var/lib/cni/networks``
   go) and the veth end comes back to the host.

nv-ipam semantics too: an ``IPPool`` (203.0.113.0/24, blocks of 16) whose status the network operator's
own pass writes (``reconcile_ippools``, run in-process against this cluster: no operator Deployment
runs here), and a macvlan NAD ``{"type": "nv-ipam", "poolName": "pool-a"}``: the pod's ``net3`` gets an
address inside the node's block, reserved by host-local in the node's nv-ipam store
(``/var/lib/cni/nv-ipam/nv-ipam``) and released on delete.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from gpu_operator.agents.multus.install import CONF_NAME
from gpu_operator.agents.multus.nvipam import DATA_DIR, STORE
from gpu_operator.api.network import NicClusterPolicy
from gpu_operator.api.network.crd import nad_crd, network_crds
from gpu_operator.kube.api import Kube
from gpu_operator.kube.connect import async_client
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.oci import ImageConfig, write_image
from gpu_operator.localcluster.waiting import WaitTimeoutError, wait_for
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.ippools import reconcile_ippools
from gpu_operator.render.network import NicFacts, render_cluster_policy
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage

JSON = dict[str, Any]
NODE = "real-node-1"
NAMESPACE = "nvidia-network-operator"
BUSYBOX = "localhost/gpu-operator-test/busybox:local"
POD = "multi-net"
SUFFIX = secrets.token_hex(2)
MACVLAN_MASTER, MACVLAN_PEER = f"gomv{SUFFIX}a", f"gomv{SUFFIX}b"
HOSTDEV, HOSTDEV_PEER = f"gohd{SUFFIX}a", f"gohd{SUFFIX}b"


def _busybox_image(output: Path) -> Path:
    binary = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if Path(p).is_file()), None)
    if binary is None:
        pytest.fail("the e2e tests need a static busybox (Debian's busybox-static)", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="busybox-layer-") as layer:
        root = Path(layer)
        (root / "bin").mkdir()
        shutil.copy2(binary, root / "bin" / "busybox")
        for tool in ("sh", "ip", "sleep", "cat", "ls"):
            (root / "bin" / tool).symlink_to("busybox")
        write_image(layers=[root], config=ImageConfig(env=("PATH=/bin",)), reference=BUSYBOX, output=output)
    return output


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def host_links() -> Iterator[None]:
    for a, b in ((MACVLAN_MASTER, MACVLAN_PEER), (HOSTDEV, HOSTDEV_PEER)):
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        _ip("link", "set", a, "up")
        _ip("link", "set", b, "up")
    try:
        yield
    finally:
        for name in (MACVLAN_MASTER, HOSTDEV, HOSTDEV_PEER):
            _ip("link", "del", name, check=False)  # a veth goes with its peer


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, host_links: None
) -> Iterator[LocalCluster]:
    busybox = _busybox_image(REPO / "build" / "image" / "test-busybox.oci.tar")
    with LocalCluster(binaries=kube_binaries, real_nodes=1, node_images=[product_image.archive, busybox],
                      node_binaries=node_binaries) as started:  # fmt: skip
        yield started


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[Client]:
    client = cluster.client()
    yield client
    client.close()


def _apply(cluster: LocalCluster, objects: list[JSON], workdir: Path, name: str) -> None:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    cluster.kubectl("apply", "--server-side", "-f", str(path))


def _multus_objects(image: str) -> list[JSON]:
    repository, version = image.rsplit(":", 1)
    registry, name = repository.rsplit("/", 1)
    policy = NicClusterPolicy.model_validate({
        "apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"},
        "spec": {"secondaryNetwork": {"multus": {"repository": registry, "image": name, "version": version}}},
    })  # fmt: skip
    states = render_cluster_policy(policy, NicFacts(namespace=NAMESPACE, agent_image=image))
    (state,) = [s for s in states if s.name == net.STATE_MULTUS]
    return list(state.objects)


def _nad(name: str, config: JSON) -> JSON:
    return {"apiVersion": net.NAD_API_VERSION, "kind": net.NAD_KIND, "metadata": {"name": name, "namespace": "default"},
            "spec": {"config": json.dumps(config)}}  # fmt: skip


def _pod() -> JSON:
    container = {"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD, "namespace": "default",
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan-a, hostdev-a, macvlan-pool"}},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [container]}}  # fmt: skip


def _phase(kube: Client) -> str | None:
    try:
        pod = kube.get(Pod, POD, namespace="default")
    except Exception:  # gone
        return None
    return pod.status.phase if pod.status else ""


def _reserved(node: RealNode, network: str) -> list[str]:
    """host-local's reservations (files named by address) in the node's own /var/lib/cni."""
    directory = node.view(f"/var/lib/cni/networks/{network}")
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit() and not p.name.startswith("last_"))


def _ippool(cluster: LocalCluster, workdir: Path) -> JSON:
    """pool-a in the agent's namespace, its blocks written by the network operator's pass (in-process)."""
    # The network chart's CRDs (the pass reads the NicClusterPolicy to know who writes the pools).
    _apply(cluster, list(network_crds().values()), workdir, "network-crds")
    cluster.kubectl("wait", "--for=condition=Established", "crd/ippools.nv-ipam.nvidia.com",
                    "crd/nicclusterpolicies.mellanox.com")  # fmt: skip
    pool = {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool",
            "metadata": {"name": "pool-a", "namespace": NAMESPACE},
            "spec": {"subnet": "203.0.113.0/24", "perNodeBlockSize": 16, "gateway": "203.0.113.254"}}  # fmt: skip
    _apply(cluster, [pool], workdir, "ippool")

    async def allocate() -> JSON | None:
        client = async_client(kubeconfig=cluster.kubeconfig_path)
        try:
            kube = Kube(client, field_manager=net.FIELD_MANAGER)
            await reconcile_ippools(kube, namespace=NAMESPACE, agent_image="")
            return await kube.get("nv-ipam.nvidia.com/v1alpha1", "IPPool", "pool-a", namespace=NAMESPACE)
        finally:
            await client.close()

    written = asyncio.run(allocate())
    assert written is not None
    (block,) = written["status"]["allocations"]
    assert block == {"nodeName": NODE, "startIP": "203.0.113.1", "endIP": "203.0.113.16"}
    return dict(block)


def _reserved_in_pool(node: RealNode, pool: str) -> list[str]:
    """host-local's reservations in the nv-ipam store of the node (one store for every pool), in ``pool``'s
    subnet (the test's only pool: 203.0.113.0/24)."""
    assert pool == "pool-a"
    directory = node.view(f"{DATA_DIR}/{STORE}")
    if not directory.is_dir():
        return []
    names = (p.name for p in directory.iterdir() if p.name[0].isdigit() and not p.name.startswith("last_"))
    return sorted(n for n in names if n.startswith("203.0.113."))


def _diagnosis(cluster: LocalCluster) -> str:
    events = cluster.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout[-3000:]
    logs = cluster.kubectl("logs", "-n", NAMESPACE, "daemonset/kube-multus-ds", "--tail=40", check=False)
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    return f"pods:\n{pods}\nevents:\n{events}\nagent log:\n{logs.stdout}{logs.stderr}"


@pytest.mark.timeout(420)
def test_pod_gets_macvlan_and_host_device_networks_and_gives_them_back(
    cluster: LocalCluster, kube: Client, tmp_path: Path, product_image: ProductImage
) -> None:
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node(NODE)
    began = time.monotonic()
    _apply(cluster, [nad_crd(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}],
           tmp_path, "crd")  # fmt: skip
    cluster.kubectl("wait", "--for=condition=Established", "crd/network-attachment-definitions.k8s.cni.cncf.io")
    _apply(cluster, _multus_objects(product_image.reference), tmp_path, "multus")
    rollout = cluster.kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/kube-multus-ds", "--timeout=90s",
                              timeout=100, check=False)  # fmt: skip
    if rollout.returncode != 0:
        pytest.fail(f"the multus agent did not roll out: {rollout.stderr}\n{_diagnosis(cluster)}", pytrace=False)
    wait_for(lambda: node.view(f"/etc/cni/net.d/{CONF_NAME}").is_file(), timeout=30, describe="our CNI conf")
    ready = time.monotonic() - began
    conf = json.loads(node.view(f"/etc/cni/net.d/{CONF_NAME}").read_text())
    assert conf["plugins"][0]["clusterNetwork"]["name"] == "gpuop"  # the node's bridge network, wrapped
    assert node.view("/opt/cni/bin/gpu-operator-multus").is_file()
    assert not Path("/opt/cni/bin/gpu-operator-multus").exists()  # the node's own /opt/cni/bin

    ipam_a = {"type": "host-local", "subnet": "192.0.2.0/24", "rangeStart": "192.0.2.10", "rangeEnd": "192.0.2.50"}
    ipam_b = {"type": "host-local", "subnet": "198.51.100.0/24", "rangeStart": "198.51.100.10",
              "rangeEnd": "198.51.100.50"}  # fmt: skip
    block = _ippool(cluster, tmp_path)
    _apply(cluster, [
        _nad("macvlan-a", {"cniVersion": "1.0.0", "type": "macvlan", "master": MACVLAN_MASTER, "mode": "bridge",
                           "ipam": ipam_a}),
        _nad("macvlan-pool", {"cniVersion": "1.0.0", "type": "macvlan", "master": MACVLAN_MASTER, "mode": "bridge",
                              "ipam": {"type": "nv-ipam", "poolName": "pool-a"}}),
        _nad("hostdev-a", {"cniVersion": "1.0.0", "type": "host-device", "device": HOSTDEV, "ipam": ipam_b}),
        _pod(),
    ], tmp_path, "workload")  # fmt: skip
    began = time.monotonic()
    try:
        wait_for(lambda: _phase(kube) == "Running", timeout=90, describe=f"pod {POD} Running")
    except WaitTimeoutError as error:
        pytest.fail(f"{error}\n{_diagnosis(cluster)}", pytrace=False)
    running = time.monotonic() - began

    # 1. net1 and net2 with their addresses; network-status lists the three networks.
    addresses = cluster.kubectl("exec", "-n", "default", POD, "--", "ip", "-o", "-4", "addr").stdout
    by_name = {line.split()[1]: line.split()[3] for line in addresses.splitlines()}
    assert by_name.get("net1", "").startswith("192.0.2."), addresses
    assert by_name.get("net2", "").startswith("198.51.100."), addresses
    assert by_name.get("eth0", "").startswith("10.244.1."), addresses
    pooled = by_name.get("net3", "").split("/")[0]
    assert pooled.startswith("203.0.113."), addresses
    assert 1 <= int(pooled.rsplit(".", 1)[1]) <= 16, (pooled, block)  # inside the node's block
    assert _ip("link", "show", HOSTDEV, check=False).returncode != 0  # moved into the pod
    pod = kube.get(Pod, POD, namespace="default")
    assert pod.metadata is not None
    assert pod.metadata.annotations is not None
    status = json.loads(pod.metadata.annotations["k8s.v1.cni.cncf.io/network-status"])
    assert [(s["name"], s["interface"], s.get("default", False)) for s in status] == [
        ("gpuop", "eth0", True), ("default/macvlan-a", "net1", False), ("default/hostdev-a", "net2", False),
        ("default/macvlan-pool", "net3", False),
    ]  # fmt: skip
    assert status[3]["ips"] == [pooled]
    assert _reserved_in_pool(node, "pool-a") == [pooled]
    assert status[1]["ips"] == [by_name["net1"].split("/")[0]]
    assert status[2]["ips"] == [by_name["net2"].split("/")[0]]
    assert _reserved(node, "macvlan-a") == status[1]["ips"]
    assert _reserved(node, "hostdev-a") == status[2]["ips"]
    assert node.view("/var/lib/cni/gpu-operator/cache").is_dir()

    # 2. Deleted: both addresses released, the veth end back on the host, the cache entry gone.
    began = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", "default", POD, "--wait=true", timeout=60)
    wait_for(lambda: not (_reserved(node, "macvlan-a") or _reserved(node, "hostdev-a")
                          or _reserved_in_pool(node, "pool-a")), timeout=30,
             describe="host-local addresses released")  # fmt: skip
    wait_for(lambda: _ip("link", "show", HOSTDEV, check=False).returncode == 0, timeout=30,
             describe=f"{HOSTDEV} back on the host")  # fmt: skip
    released = time.monotonic() - began
    assert not list(node.view("/var/lib/cni/gpu-operator/cache").iterdir())
    print(f"multus agent ready {ready:.1f} s; pod with three secondary networks Running {running:.1f} s; "
          f"deleted and released {released:.1f} s")  # fmt: skip

    # The agent's DaemonSet deleted: its conf goes with it (new pods get the bridge alone).
    cluster.kubectl("delete", "daemonset", "-n", NAMESPACE, "kube-multus-ds", "--wait=true", timeout=60)
    wait_for(lambda: not node.view(f"/etc/cni/net.d/{CONF_NAME}").exists(), timeout=30,
             describe="our CNI conf removed")  # fmt: skip
