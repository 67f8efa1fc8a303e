"""The RDMA shared and SR-IOV device plugins on a real node with two ConnectX-7 cards (InfiniBand, 2 VFs each).

One real kubelet node (containerd, runc). The machine has no Mellanox NIC and its kernel no RDMA stack,
so the node is given the cards by ``sim.nicnodes.nic_node_setup``: their PCI functions (2 PFs, 4 VFs) in
the node's fake ``/sys/bus/pci/devices`` and their RDMA char devices (``uverbsN``, ``umadN``, ``issmN``,
``rdma_cm``, mknod'd) in the node's ``/dev`` overlay. The test labels the node as the operator's NFD rule
and OFED state would (a Mellanox NIC present, no MOFED to wait for), renders the NicClusterPolicy's
``rdmaSharedDevicePlugin`` and ``sriovDevicePlugin`` states with this operator's image in-process (no
network operator runs) and applies their objects. Then:

1. the Node's allocatable shows ``rdma/rdma_shared_device_a: 10`` (the PFs, 15b3:1021) and
   ``nvidia.com/sriov_ib: 4`` (the VFs, 15b3:101e, isRdma);
2. a pod asking for one ``rdma/rdma_shared_device_a`` runs with the PFs' char devices and ``rdma_cm``
   in its ``/dev/infiniband`` (through the plugin's CDI spec), none of the VFs';
3. a pod asking for one ``nvidia.com/sriov_ib`` has ``PCIDEVICE_NVIDIA_COM_SRIOV_IB`` (one VF's address)
   and its ``_INFO`` in its environment, that VF's char devices (and ``rdma_cm``) alone in its
   ``/dev/infiniband``, and the VF's device-info file is in the node's
   ``/var/run/k8s.cni.cncf.io/devinfo/dp``;
4. the pods and the plugins deleted, the device-info file goes with the SR-IOV plugin.
"""

from __future__ import annotations

import json
import shutil
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
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.oci import ImageConfig, write_image
from gpu_operator.localcluster.waiting import WaitTimeoutError, wait_for
from gpu_operator.names import network as net
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.nic.types import NetFunction
from gpu_operator.render.network import NicFacts, render_cluster_policy
from gpu_operator.sim.nicnodes import nic_node_setup
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage

JSON = dict[str, Any]
NODE = "real-node-1"
NAMESPACE = "nvidia-network-operator"
BUSYBOX = "localhost/gpu-operator-test/busybox-nic:local"
RDMA_RESOURCE, SRIOV_RESOURCE = "rdma/rdma_shared_device_a", "nvidia.com/sriov_ib"
RDMA_POD, SRIOV_POD = "rdma-shared", "sriov-ib"
SRIOV_ENV = "PCIDEVICE_NVIDIA_COM_SRIOV_IB"
DEVINFO_DIR = "/run/k8s.cni.cncf.io/devinfo/dp"  # /var/run is /run; view() needs the path inside the node
RDMA_CONFIG = {"configList": [{"resourceName": "rdma_shared_device_a", "rdmaHcaMax": 10,
                               "selectors": {"vendors": ["15b3"], "deviceIDs": ["1021"]}}]}  # fmt: skip
SRIOV_SELECTORS = {"vendors": ["15b3"], "devices": ["101e"], "isRdma": True}
SRIOV_CONFIG = {"resourceList": [{"resourcePrefix": "nvidia.com", "resourceName": "sriov_ib",
                                  "selectors": SRIOV_SELECTORS}]}  # fmt: skip


def _busybox_image(output: Path) -> Path:
    binary = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if Path(p).is_file()), None)
    if binary is None:
        pytest.fail("the e2e tests need a static busybox (Debian's busybox-static)", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="busybox-layer-") as layer:
        root = Path(layer)
        (root / "bin").mkdir()
        shutil.copy2(binary, root / "bin" / "busybox")
        for tool in ("sh", "sleep", "cat", "ls", "env"):
            (root / "bin" / tool).symlink_to("busybox")
        write_image(layers=[root], config=ImageConfig(env=("PATH=/bin",)), reference=BUSYBOX, output=output)
    return output


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage
) -> Iterator[LocalCluster]:
    busybox = _busybox_image(REPO / "build" / "image" / "test-busybox-nic.oci.tar")
    with LocalCluster(binaries=kube_binaries, real_nodes=1, node_images=[product_image.archive, busybox],
                      node_binaries=node_binaries,
                      node_setups=[nic_node_setup(model="cx7", count=2)]) as started:  # fmt: skip
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


def _plugin_objects(image: str) -> list[JSON]:
    repository, version = image.rsplit(":", 1)
    registry, name = repository.rsplit("/", 1)
    ours = {"repository": registry, "image": name, "version": version}
    policy = NicClusterPolicy.model_validate({
        "apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"},
        "spec": {"rdmaSharedDevicePlugin": {**ours, "config": json.dumps(RDMA_CONFIG)},
                 "sriovDevicePlugin": {**ours, "config": json.dumps(SRIOV_CONFIG)}},
    })  # fmt: skip
    states = {s.name: s for s in render_cluster_policy(policy, NicFacts(namespace=NAMESPACE, agent_image=image))}
    return [*states[net.STATE_RDMA_DP].objects, *states[net.STATE_SRIOV_DP].objects]


def _pod(name: str, resource: str) -> JSON:
    container = {"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                 "resources": {"limits": {resource: "1"}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [container]}}  # fmt: skip


def _allocatable(kube: Client) -> dict[str, str]:
    node = kube.get(Node, NODE)
    return dict((node.status.allocatable if node.status else None) or {})


def _phase(kube: Client, name: str) -> str | None:
    try:
        pod = kube.get(Pod, name, namespace="default")
    except Exception:  # gone
        return None
    return pod.status.phase if pod.status else ""


def _char_devices(cluster: LocalCluster, pod: str) -> dict[str, str]:
    """``ls -l /dev/infiniband`` in the pod: name -> its mode string (``crw-...`` for a char device)."""
    listing = cluster.kubectl("exec", "-n", "default", pod, "--", "ls", "-l", "/dev/infiniband").stdout
    return {line.split()[-1]: line.split()[0] for line in listing.splitlines() if line and not line.startswith("total")}


def _names(function: NetFunction) -> set[str]:
    return {Path(p).name for device in function.rdma for p in device.char_devices}


def _diagnosis(cluster: LocalCluster) -> str:
    events = cluster.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout[-3000:]
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    logs = ""
    for daemonset in ("rdma-shared-dp-ds", "network-operator-sriov-device-plugin"):
        result = cluster.kubectl("logs", "-n", NAMESPACE, f"daemonset/{daemonset}", "--tail=30", check=False)
        logs += f"{daemonset}:\n{result.stdout}{result.stderr}\n"
    return f"pods:\n{pods}\nevents:\n{events}\nagent logs:\n{logs}"


def _devinfo(node: RealNode) -> list[str]:
    directory = node.view(DEVINFO_DIR)
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


@pytest.mark.timeout(480)
def test_rdma_shared_and_sriov_device_plugins_serve_fake_nics_on_a_real_node(
    cluster: LocalCluster, kube: Client, tmp_path: Path, product_image: ProductImage
) -> None:
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node(NODE)
    # The node's NICs as its containers see them: its fake PCI tree and /dev, through its namespace.
    functions = SysfsNics(sys_root=node.view("/sys"), dev_root=node.view("/dev"), netlink=False).functions()
    pfs = [f for f in functions if not f.is_vf]
    vfs = {f.address: f for f in functions if f.is_vf}
    assert [(f.device, f.link_type, len(f.vfs)) for f in pfs] == [("1021", "infiniband", 2)] * 2
    assert len(vfs) == 4
    assert all(f.rdma and f.rdma[0].complete for f in functions)

    began = time.monotonic()
    cluster.kubectl("label", "node", NODE, f"{net.NIC_PRESENT}=true", f"{net.MOFED_WAIT}=false", "--overwrite")
    _apply(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}], tmp_path, "ns")
    _apply(cluster, _plugin_objects(product_image.reference), tmp_path, "plugins")
    for daemonset in ("rdma-shared-dp-ds", "network-operator-sriov-device-plugin"):
        rollout = cluster.kubectl("rollout", "status", "-n", NAMESPACE, f"daemonset/{daemonset}", "--timeout=120s",
                                  timeout=130, check=False)  # fmt: skip
        if rollout.returncode != 0:
            pytest.fail(f"{daemonset} did not roll out: {rollout.stderr}\n{_diagnosis(cluster)}", pytrace=False)

    # 1. The resources on the Node.
    try:
        wait_for(lambda: (_allocatable(kube).get(RDMA_RESOURCE), _allocatable(kube).get(SRIOV_RESOURCE))
                 == ("10", str(len(vfs))), timeout=60, describe="both resources allocatable")  # fmt: skip
    except WaitTimeoutError as error:
        pytest.fail(f"{error}: {_allocatable(kube)}\n{_diagnosis(cluster)}", pytrace=False)
    advertised = time.monotonic() - began

    # 2 and 3. A pod of each resource.
    began = time.monotonic()
    _apply(cluster, [_pod(RDMA_POD, RDMA_RESOURCE), _pod(SRIOV_POD, SRIOV_RESOURCE)], tmp_path, "pods")
    try:
        wait_for(lambda: _phase(kube, RDMA_POD) == _phase(kube, SRIOV_POD) == "Running", timeout=90,
                 describe="both pods Running")  # fmt: skip
    except WaitTimeoutError as error:
        pytest.fail(f"{error}\n{_diagnosis(cluster)}", pytrace=False)
    running = time.monotonic() - began

    rdma_devices = _char_devices(cluster, RDMA_POD)
    assert set(rdma_devices) == set().union(*(_names(f) for f in pfs)), rdma_devices
    assert all(mode.startswith("c") for mode in rdma_devices.values()), rdma_devices
    assert not set(rdma_devices) & set().union(*(_names(f) - {"rdma_cm"} for f in vfs.values()))

    env = dict(
        line.split("=", 1)
        for line in cluster.kubectl("exec", "-n", "default", SRIOV_POD, "--", "env").stdout.splitlines()
        if "=" in line
    )
    address = env.get(SRIOV_ENV, "")
    assert address in vfs, env
    info = json.loads(env[f"{SRIOV_ENV}_INFO"])
    assert set(info) == {address}
    assert info[address]["rdma"]["rdma_dev"] == vfs[address].rdma[0].name
    sriov_devices = _char_devices(cluster, SRIOV_POD)
    assert set(sriov_devices) == _names(vfs[address]), sriov_devices
    assert all(mode.startswith("c") for mode in sriov_devices.values()), sriov_devices
    devinfo = f"{SRIOV_RESOURCE.replace('/', '-')}-{address}-device.json"
    assert devinfo in _devinfo(node), _devinfo(node)
    written = json.loads(node.view(f"{DEVINFO_DIR}/{devinfo}").read_text())
    assert written["pci"]["pci-address"] == address
    assert written["pci"]["rdma-device"] == vfs[address].rdma[0].name

    # 4. Cleaned up: the pods, then the plugins (the SR-IOV plugin takes its device-info files along).
    began = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", "default", RDMA_POD, SRIOV_POD, "--wait=true", timeout=60)
    for daemonset in ("rdma-shared-dp-ds", "network-operator-sriov-device-plugin"):
        cluster.kubectl("delete", "daemonset", "-n", NAMESPACE, daemonset, "--wait=true", timeout=60)
    wait_for(lambda: not _devinfo(node), timeout=30, describe="device-info files removed")
    wait_for(lambda: RDMA_RESOURCE not in _allocatable(kube) or _allocatable(kube)[RDMA_RESOURCE] == "0",
             timeout=60, describe="rdma resource withdrawn")  # fmt: skip
    cleaned = time.monotonic() - began
    print(f"device plugins advertised {advertised:.1f} s; two pods Running {running:.1f} s; "
          f"cleaned up {cleaned:.1f} s")  # fmt: skip
