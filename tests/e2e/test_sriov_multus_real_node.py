"""The SR-IOV flow on a real node: a VF allocated by the device plugin, moved into the pod by host-device.

One real kubelet node (containerd, runc, Debian's CNI plugins 1.1.1) with two fake ConnectX-7 cards
(``sim.nicnodes.nic_node_setup``: 2 PFs, 4 VFs in the node's fake ``/sys/bus/pci/devices``). The test
renders the NicClusterPolicy's ``sriovDevicePlugin`` and ``secondaryNetwork.multus`` states with this
operator's image in-process (no network operator runs) and applies their objects, the node labelled as
the operator's NFD rule and OFED state would.

The VFs' netdevs are directories ``<vf>/net/<ifname>`` in the fake tree; on the host (whose network
namespace the node shares) the test makes a veth pair per VF whose one end has exactly that
``<ifname>`` (the peer a short name of this run). ``host-device`` given the VF's PCI address
(``pciBusID``, which our multus agent sets with ``deviceID`` from the kubelet's PodResources, as
Multus does) lists ``/sys/bus/pci/devices/<vf>/net/`` in the node's namespace, finds ``<ifname>`` and
moves that real link into the pod. host-device also resolves the VF's ``driver`` link (a userspace
driver means DPDK mode): the fake tree's resolves to a ``mlx5_core`` directory inside the function's
own (``nic.simulated.write_pci_nics``), since this kernel has no ``/sys/bus/pci/drivers/mlx5_core``.

A NAD ``sriov-net`` annotated ``k8s.v1.cni.cncf.io/resourceName: nvidia.com/sriov_ib`` (host-device,
host-local 192.0.2.64/26) and a busybox pod requesting one ``nvidia.com/sriov_ib`` annotated
``k8s.v1.cni.cncf.io/networks: sriov-net``:

1. runs with ``net1`` = the link named like the allocated VF's netdev (``PCIDEVICE_NVIDIA_COM_SRIOV_IB``
   names the VF; its MAC is the host link's) with an address in 192.0.2.64/26; the link is gone from
   the host; the ``network-status`` annotation's ``device-info`` names the VF's PCI address;
2. deleted, gives the address back (host-local's file goes) and the link comes back to the host.
"""

from __future__ import annotations

import ipaddress
import json
import re
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
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.api.network import NicClusterPolicy
from gpu_operator.api.network.crd import nad_crd
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.oci import ImageConfig, write_image
from gpu_operator.localcluster.waiting import WaitTimeoutError, wait_for
from gpu_operator.names import network as net
from gpu_operator.nic.simulated import DRIVER, write_pci_nics
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.render.network import NicFacts, render_cluster_policy
from gpu_operator.sim.nicnodes import nic_node_setup
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage

JSON = dict[str, Any]
NODE = "real-node-1"
NAMESPACE = "nvidia-network-operator"
BUSYBOX = "localhost/gpu-operator-test/busybox-sriov:local"
POD, NAD = "sriov-pod", "sriov-net"
RESOURCE = "nvidia.com/sriov_ib"
SRIOV_ENV = "PCIDEVICE_NVIDIA_COM_SRIOV_IB"
SUBNET = ipaddress.ip_network("192.0.2.64/26")
SRIOV_CONFIG = {"resourceList": [{"resourcePrefix": "nvidia.com", "resourceName": "sriov_ib",
                                  "selectors": {"vendors": ["15b3"], "devices": ["101e"]}}]}  # fmt: skip
DAEMONSETS = ("network-operator-sriov-device-plugin", "kube-multus-ds")
NIC_MODEL, NIC_COUNT = "cx7", 2
SUFFIX = secrets.token_hex(2)
MAC = re.compile(r"link/ether ([0-9a-f:]{17})")


def _vf_netdevs() -> dict[str, str]:
    """VF PCI address -> its netdev's name, as ``write_pci_nics`` lays the node's cards out."""
    with tempfile.TemporaryDirectory(prefix="sriov-layout-") as scratch:
        functions = write_pci_nics(devices=Path(scratch) / "devices", dev_root=Path(scratch) / "dev",
                                   model=NIC_MODEL, count=NIC_COUNT, node_index=1, mknod=False)  # fmt: skip
    return {f.address: f.interfaces[0] for f in functions if f.is_vf}


VF_NETDEVS = _vf_netdevs()
PEERS = {ifname: f"gosr{SUFFIX}{n}" for n, ifname in enumerate(sorted(VF_NETDEVS.values()))}


def _busybox_image(output: Path) -> Path:
    binary = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if Path(p).is_file()), None)
    if binary is None:
        pytest.fail("the e2e tests need a static busybox (Debian's busybox-static)", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="busybox-layer-") as layer:
        root = Path(layer)
        (root / "bin").mkdir()
        shutil.copy2(binary, root / "bin" / "busybox")
        for tool in ("sh", "ip", "sleep", "cat", "ls", "env"):
            (root / "bin" / tool).symlink_to("busybox")
        write_image(layers=[root], config=ImageConfig(env=("PATH=/bin",)), reference=BUSYBOX, output=output)
    return output


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _host_mac(name: str) -> str | None:
    """The host link ``name``'s MAC, None when the host has no such link."""
    shown = _ip("-j", "link", "show", name, check=False)
    if shown.returncode != 0:
        return None
    (link,) = json.loads(shown.stdout)
    return str(link["address"])


@pytest.fixture(scope="module")
def vf_links() -> Iterator[dict[str, str]]:
    """A veth pair per VF, one end named as the VF's netdev: netdev name -> its MAC."""
    taken = [name for name in (*PEERS, *PEERS.values()) if _host_mac(name) is not None]
    if taken:
        pytest.fail(f"host links already exist (another run's?): {taken}", pytrace=False)
    try:
        for ifname, peer in PEERS.items():
            _ip("link", "add", ifname, "type", "veth", "peer", "name", peer)
            _ip("link", "set", ifname, "up")
            _ip("link", "set", peer, "up")
        yield {ifname: str(_host_mac(ifname)) for ifname in PEERS}
    finally:
        for peer in PEERS.values():
            _ip("link", "del", peer, check=False)  # a veth goes with its peer, wherever that is


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, vf_links: dict[str, str]
) -> Iterator[LocalCluster]:
    busybox = _busybox_image(REPO / "build" / "image" / "test-busybox-sriov.oci.tar")
    setup = nic_node_setup(model=NIC_MODEL, count=NIC_COUNT)
    with LocalCluster(binaries=kube_binaries, real_nodes=1, node_images=[product_image.archive, busybox],
                      node_binaries=node_binaries, node_setups=[setup]) as started:  # fmt: skip
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


def _policy_objects(image: str) -> list[JSON]:
    repository, version = image.rsplit(":", 1)
    registry, name = repository.rsplit("/", 1)
    ours = {"repository": registry, "image": name, "version": version}
    policy = NicClusterPolicy.model_validate({
        "apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"},
        "spec": {"sriovDevicePlugin": {**ours, "config": json.dumps(SRIOV_CONFIG)},
                 "secondaryNetwork": {"multus": ours}},
    })  # fmt: skip
    states = {s.name: s for s in render_cluster_policy(policy, NicFacts(namespace=NAMESPACE, agent_image=image))}
    return [*states[net.STATE_SRIOV_DP].objects, *states[net.STATE_MULTUS].objects]


def _workload() -> list[JSON]:
    config = {"cniVersion": "0.4.0", "type": "host-device", "ipam": {"type": "host-local", "subnet": str(SUBNET)}}
    nad = {"apiVersion": net.NAD_API_VERSION, "kind": net.NAD_KIND,
           "metadata": {"name": NAD, "namespace": "default", "annotations": {net.NAD_RESOURCE_NAME: RESOURCE}},
           "spec": {"config": json.dumps(config)}}  # fmt: skip
    container = {"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                 "resources": {"limits": {RESOURCE: "1"}}}  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": POD, "namespace": "default", "annotations": {"k8s.v1.cni.cncf.io/networks": NAD}},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [container]}}  # fmt: skip
    return [nad, pod]


def _allocatable(kube: Client) -> dict[str, str]:
    node = kube.get(Node, NODE)
    return dict((node.status.allocatable if node.status else None) or {})


def _phase(kube: Client) -> str | None:
    try:
        pod = kube.get(Pod, POD, namespace="default")
    except Exception:  # gone
        return None
    return pod.status.phase if pod.status else ""


def _reserved(node: RealNode) -> list[str]:
    """host-local's reservations (files named by address) in the node's own /var/lib/cni."""
    directory = node.view(f"/var/lib/cni/networks/{NAD}")
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name[0].isdigit() and not p.name.startswith("last_"))


def _exec(cluster: LocalCluster, *argv: str) -> str:
    return cluster.kubectl("exec", "-n", "default", POD, "--", *argv).stdout


def _diagnosis(cluster: LocalCluster) -> str:
    events = cluster.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout[-3000:]
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    logs = ""
    for daemonset in DAEMONSETS:
        result = cluster.kubectl("logs", "-n", NAMESPACE, f"daemonset/{daemonset}", "--tail=30", check=False)
        logs += f"{daemonset}:\n{result.stdout}{result.stderr}\n"
    return f"pods:\n{pods}\nevents:\n{events}\nagent logs:\n{logs}"


@pytest.mark.timeout(480)
def test_sriov_vf_is_moved_into_the_pod_by_host_device_and_given_back(
    cluster: LocalCluster, kube: Client, tmp_path: Path, product_image: ProductImage, vf_links: dict[str, str]
) -> None:
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node(NODE)
    # The node's VFs as its containers see them: the netdev names the host links were given.
    functions = SysfsNics(sys_root=node.view("/sys"), dev_root=node.view("/dev"), netlink=False).functions()
    vfs = {f.address: f for f in functions if f.is_vf}
    assert {a: f.interfaces[0] for a, f in vfs.items()} == VF_NETDEVS
    assert {f.driver for f in vfs.values()} == {DRIVER}

    began = time.monotonic()
    cluster.kubectl("label", "node", NODE, f"{net.NIC_PRESENT}=true", f"{net.MOFED_WAIT}=false", "--overwrite")
    _apply(cluster, [nad_crd(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}],
           tmp_path, "crd")  # fmt: skip
    cluster.kubectl("wait", "--for=condition=Established", "crd/network-attachment-definitions.k8s.cni.cncf.io")
    _apply(cluster, _policy_objects(product_image.reference), tmp_path, "policy")
    for daemonset in DAEMONSETS:
        rollout = cluster.kubectl("rollout", "status", "-n", NAMESPACE, f"daemonset/{daemonset}", "--timeout=120s",
                                  timeout=130, check=False)  # fmt: skip
        if rollout.returncode != 0:
            pytest.fail(f"{daemonset} did not roll out: {rollout.stderr}\n{_diagnosis(cluster)}", pytrace=False)
    try:
        wait_for(lambda: _allocatable(kube).get(RESOURCE) == str(len(vfs)), timeout=60,
                 describe=f"{RESOURCE} allocatable")  # fmt: skip
    except WaitTimeoutError as error:
        pytest.fail(f"{error}: {_allocatable(kube)}\n{_diagnosis(cluster)}", pytrace=False)
    ready = time.monotonic() - began

    began = time.monotonic()
    _apply(cluster, _workload(), tmp_path, "workload")
    try:
        wait_for(lambda: _phase(kube) == "Running", timeout=90, describe=f"pod {POD} Running")
    except WaitTimeoutError as error:
        pytest.fail(f"{error}\n{_diagnosis(cluster)}", pytrace=False)
    running = time.monotonic() - began

    # 1. The allocated VF's netdev is the pod's net1, with an address of the NAD's subnet.
    env = dict(line.split("=", 1) for line in _exec(cluster, "env").splitlines() if "=" in line)
    address = env.get(SRIOV_ENV, "")
    assert address in vfs, env
    ifname = VF_NETDEVS[address]
    addresses = _exec(cluster, "ip", "-o", "-4", "addr")
    by_name = {line.split()[1].split("@")[0]: line.split()[3] for line in addresses.splitlines()}
    assert "net1" in by_name, addresses
    pod_ip = by_name["net1"].split("/")[0]
    assert ipaddress.ip_address(pod_ip) in SUBNET, addresses
    link = _exec(cluster, "ip", "-o", "link", "show", "net1")
    macs = MAC.findall(link)
    assert macs == [vf_links[ifname]], (link, vf_links)
    assert _host_mac(ifname) is None  # moved off the host
    assert all(_host_mac(other) == mac for other, mac in vf_links.items() if other != ifname)
    pod = kube.get(Pod, POD, namespace="default")
    assert pod.metadata is not None
    assert pod.metadata.annotations is not None
    status = json.loads(pod.metadata.annotations["k8s.v1.cni.cncf.io/network-status"])
    assert [(s["name"], s["interface"]) for s in status] == [("gpuop", "eth0"), (f"default/{NAD}", "net1")], status
    assert status[1]["ips"] == [pod_ip]
    assert status[1]["device-info"]["type"] == "pci", status[1]
    assert status[1]["device-info"]["pci"]["pci-address"] == address, status[1]
    assert _reserved(node) == [pod_ip]

    # 2. Deleted: the address released, the VF's link back on the host under its name.
    began = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", "default", POD, "--wait=true", timeout=60)
    wait_for(lambda: not _reserved(node), timeout=30, describe="host-local address released")
    wait_for(lambda: _host_mac(ifname) == vf_links[ifname], timeout=30, describe=f"{ifname} back on the host")
    released = time.monotonic() - began
    print(f"device plugin and multus ready {ready:.1f} s; pod with VF {address} ({ifname}) Running {running:.1f} s; "
          f"deleted and released {released:.1f} s")  # fmt: skip
