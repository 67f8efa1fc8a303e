"""The Kubernetes objects a simulated node writes, as plain JSON (pure functions, no I/O).

* :class:`NodeShape`: what a node looks like (GPU count, Mellanox NICs, CPUs, memory, OS, kernel), made from a
  GPU catalog profile (and a NIC request, ``gpu_operator.sim.nics``) by ``gpu_operator.sim.shapes``.
* The Node a kubelet would register: NFD-style labels (``feature.node.kubernetes.io/...``: the NVIDIA PCI
  vendor on GPU nodes, the Mellanox one on NIC nodes, kernel version, OS release), capacity, conditions,
  addresses and nodeInfo. Nodes accept
  their whole status on create, so one POST registers a Ready node.
* The node Lease (``kube-node-lease/<node>``, owned by the Node so it goes with it) and the status patches
  of the heartbeat.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_operator.names.network import NIC_PRESENT
from gpu_operator.names.objects import is_ready

JSON = dict[str, Any]
NFD = "feature.node.kubernetes.io"
NVIDIA_PCI_VENDOR = "10de"
#: PCI class 0302 (3D controller): how datacenter GPUs enumerate.
GPU_PCI_CLASS = "0302"
SIM_LABEL = "gpu-operator.sim/node"
PROFILE_LABEL = "gpu-operator.sim/profile"
#: On simulated NIC nodes: the NIC model (``cx7``), so a test can select them without the NFD label.
NIC_LABEL = "gpu-operator.sim/nic"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
PODS_PER_NODE = 110
NODE_IP_BASE = ipaddress.IPv4Address("172.16.0.1")
POD_IP_BASE = ipaddress.IPv4Address("10.64.0.0")
#: The largest node index: node addresses stay in 172.16.0.0/12 and each node's pod /24 within
#: 10.64.0.0-10.255.255.255 (several simulators share one cluster with disjoint index ranges).
MAX_NODE_INDEX = 49_151

_OS_NAMES = {"ubuntu": "Ubuntu {v} LTS", "rhel": "Red Hat Enterprise Linux {v}", "rocky": "Rocky Linux {v}"}


@dataclass(frozen=True, kw_only=True)
class NodeShape:
    """The hardware and OS of a simulated node."""

    profile: str
    gpu_count: int
    cpu_cores: int
    memory_mib: int
    os_id: str
    os_version_id: str
    kernel_version: str
    arch: str = "amd64"
    container_runtime: str = "containerd://1.7.27"
    #: Mellanox NICs (``gpu_operator.sim.nics``): the model key and how many; "" and 0 without NICs.
    nic_model: str = ""
    nic_count: int = 0

    @property
    def os_image(self) -> str:
        return _OS_NAMES.get(self.os_id, "{id} {v}").format(id=self.os_id, v=self.os_version_id)


def time_text(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time_text(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_ip(index: int) -> str:
    """Node ``index`` (0..``MAX_NODE_INDEX``) gets 172.16.0.1 + index (unique per index)."""
    return str(NODE_IP_BASE + index)


def pod_ip(*, node_index: int, slot: int) -> str:
    """Pod ``slot`` (0-253) of node ``index`` gets an address in the node's own /24."""
    return str(POD_IP_BASE + node_index * 256 + 1 + slot % 254)


def _kernel_labels(kernel: str) -> dict[str, str]:
    numbers = kernel.split("-", 1)[0].split(".")
    labels = {f"{NFD}/kernel-version.full": kernel}
    for key, value in zip(("major", "minor", "revision"), numbers, strict=False):
        labels[f"{NFD}/kernel-version.{key}"] = value
    return labels


def node_labels(*, name: str, shape: NodeShape) -> dict[str, str]:
    """The labels a kubelet and NFD (with the operator chart's PCI whitelist) put on this node."""
    major, _, minor = shape.os_version_id.partition(".")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": shape.arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": shape.arch,
        f"{NFD}/system-os_release.ID": shape.os_id,
        f"{NFD}/system-os_release.VERSION_ID": shape.os_version_id,
        f"{NFD}/system-os_release.VERSION_ID.major": major,
        **_kernel_labels(shape.kernel_version),
        SIM_LABEL: "true",
        PROFILE_LABEL: shape.profile,
    }
    if minor:
        labels[f"{NFD}/system-os_release.VERSION_ID.minor"] = minor
    if shape.gpu_count > 0:
        labels[f"{NFD}/pci-{NVIDIA_PCI_VENDOR}.present"] = "true"
        labels[f"{NFD}/pci-{GPU_PCI_CLASS}_{NVIDIA_PCI_VENDOR}.present"] = "true"
    if shape.nic_count > 0:
        # What the network operator chart's NodeFeatureRule makes NFD write (vendor 15b3, class 0200/0207).
        labels[NIC_PRESENT] = "true"
        labels[NIC_LABEL] = shape.nic_model
    return labels


def base_capacity(shape: NodeShape) -> dict[str, str]:
    return {
        "cpu": str(shape.cpu_cores),
        "memory": f"{shape.memory_mib * 1024}Ki",
        "pods": str(PODS_PER_NODE),
        "ephemeral-storage": "1905797660Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }


def conditions(*, ready: bool, heartbeat: dt.datetime, transition: dt.datetime) -> list[JSON]:
    """The four kubelet conditions; ``ready=False`` reports what a kubelet with a broken runtime would."""
    rows = [
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status (simulated)")
        if ready
        else ("Ready", "False", "KubeletNotReady", "container runtime is down (simulated fault)"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": time_text(heartbeat),
            "lastTransitionTime": time_text(transition),
        }
        for kind, status, reason, message in rows
    ]


def _hex_id(name: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:32]


def node_manifest(
    *,
    name: str,
    shape: NodeShape,
    index: int,
    kubelet_version: str,
    capacity: Mapping[str, str],
    allocatable: Mapping[str, str],
    now: dt.datetime,
) -> JSON:
    """The Node to POST, status included."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name=name, shape=shape),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(allocatable),
            "conditions": conditions(ready=True, heartbeat=now, transition=now),
            "addresses": [{"type": "InternalIP", "address": node_ip(index)}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _hex_id(name, "machine"),
                "systemUUID": _hex_id(name, "system"),
                "bootID": _hex_id(name, "boot"),
                "kernelVersion": shape.kernel_version,
                "osImage": shape.os_image,
                "containerRuntimeVersion": shape.container_runtime,
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": shape.arch,
            },
        },
    }


def lease_manifest(*, name: str, node_uid: str, now: dt.datetime) -> JSON:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time_text(now),
        },
    }


#: Taints the node-lifecycle controller puts on a node whose kubelet stopped reporting.
LIFECYCLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def node_healthy(node: JSON) -> bool:
    """Ready and free of the lifecycle taints: what a simulated kubelet must keep its node (a Node as JSON)."""
    ready = is_ready(node)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") in LIFECYCLE_TAINTS for t in taints)


def lease_renewal(now: dt.datetime) -> JSON:
    return {"spec": {"renewTime": micro_time_text(now)}}


def status_patch(
    *,
    ready: bool,
    heartbeat: dt.datetime,
    transition: dt.datetime,
    capacity: Mapping[str, str | None] | None = None,
    allocatable: Mapping[str, str | None] | None = None,
) -> JSON:
    """A strategic-merge patch of ``nodes/<name>/status`` (conditions merge by type; None removes a resource)."""
    status: JSON = {"conditions": conditions(ready=ready, heartbeat=heartbeat, transition=transition)}
    if capacity is not None:
        status["capacity"] = dict(capacity)
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    return {"status": status}
