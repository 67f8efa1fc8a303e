"""The Node, Lease and status bodies a simulated node writes, and node specs/shapes from the GPU catalog."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest

from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.objects import (
    MAX_NODE_INDEX,
    NFD,
    NodeShape,
    lease_manifest,
    node_healthy,
    node_ip,
    node_labels,
    node_manifest,
    pod_ip,
    status_patch,
)
from gpu_operator.sim.shapes import NodeRequest, os_release, parse_node_spec, shape_from_profile

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
H100 = NodeShape(
    profile="dgx-h100",
    gpu_count=8,
    cpu_cores=224,
    memory_mib=2 * 1024 * 1024,
    os_id="ubuntu",
    os_version_id="22.04",
    kernel_version="5.15.0-1063-nvidia",
)


def test_gpu_node_labels_follow_nfd() -> None:
    labels = node_labels(name="n1", shape=H100)
    assert labels[f"{NFD}/pci-10de.present"] == "true"
    assert labels[f"{NFD}/pci-0302_10de.present"] == "true"
    assert labels[f"{NFD}/kernel-version.full"] == "5.15.0-1063-nvidia"
    assert (labels[f"{NFD}/kernel-version.major"], labels[f"{NFD}/kernel-version.minor"]) == ("5", "15")
    assert labels[f"{NFD}/kernel-version.revision"] == "0"
    assert labels[f"{NFD}/system-os_release.ID"] == "ubuntu"
    assert labels[f"{NFD}/system-os_release.VERSION_ID"] == "22.04"
    assert labels[f"{NFD}/system-os_release.VERSION_ID.major"] == "22"
    assert labels["kubernetes.io/hostname"] == "n1"
    assert labels["gpu-operator.sim/profile"] == "dgx-h100"


def test_cpu_node_has_no_gpu_labels_but_still_nfd() -> None:
    shape = NodeShape(
        profile="cpu-only",
        gpu_count=0,
        cpu_cores=16,
        memory_mib=65536,
        os_id="rhel",
        os_version_id="9.4",
        kernel_version="5.14.0-427.13.1.el9_4.x86_64",
    )
    labels = node_labels(name="c", shape=shape)
    assert not any("10de" in key for key in labels)
    assert labels[f"{NFD}/kernel-version.minor"] == "14"
    assert shape.os_image == "Red Hat Enterprise Linux 9.4"


def test_node_manifest_registers_a_ready_node() -> None:
    manifest = node_manifest(
        name="n1",
        shape=H100,
        index=3,
        kubelet_version="v1.37.2",
        capacity={"cpu": "224", "nvidia.com/gpu": "8"},
        allocatable={"cpu": "224", "nvidia.com/gpu": "7"},
        now=NOW,
    )
    status = manifest["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "8"
    assert status["allocatable"]["nvidia.com/gpu"] == "7"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastHeartbeatTime"]) == ("True", "2026-01-02T03:04:05Z")
    assert status["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert status["nodeInfo"]["osImage"] == "Ubuntu 22.04 LTS"
    assert status["addresses"][0] == {"type": "InternalIP", "address": node_ip(3)}


def test_lease_and_status_patch() -> None:
    lease = lease_manifest(name="n1", node_uid="u-1", now=NOW)
    assert lease["spec"]["renewTime"] == "2026-01-02T03:04:05.678901Z"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    patch = status_patch(ready=False, heartbeat=NOW, transition=NOW, capacity={"example.com/x": None})
    ready = patch["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "KubeletNotReady")
    assert patch["status"]["capacity"] == {"example.com/x": None}


def test_addresses_are_distinct() -> None:
    assert node_ip(0) != node_ip(1)
    assert pod_ip(node_index=0, slot=0) == "10.64.0.1"
    assert pod_ip(node_index=1, slot=0) == "10.64.1.1"
    assert len({pod_ip(node_index=n, slot=s) for n in range(3) for s in range(254)}) == 3 * 254


def test_parse_node_spec() -> None:
    assert parse_node_spec("dgx-h100:2, cpu-only") == [
        NodeRequest(profile="dgx-h100", count=2),
        NodeRequest(profile="cpu-only", count=1),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty node spec"),
        ("dgx-h999:1", "unknown node profile 'dgx-h999'"),
        ("cpu-only:x", "bad node count"),
        ("cpu-only:0", "from 1 to 50,000"),
        ("cpu-only:50001", "from 1 to 50,000"),
        ("cpu-only:\u0661", "bad node count"),
        ("cpu-only:" + "9" * 5000, "bad node count"),
    ],
)
def test_parse_node_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_node_spec(spec)


@pytest.mark.parametrize("name", sorted(NODE_PROFILES))
def test_every_catalog_profile_makes_a_shape(name: str) -> None:
    profile = NODE_PROFILES[name]
    shape = shape_from_profile(name)
    assert (shape.gpu_count, shape.cpu_cores, shape.kernel_version) == (
        profile.gpu_count,
        profile.cpu_cores,
        profile.kernel_version,
    )
    assert shape.memory_mib * (1 << 20) == profile.memory_bytes
    assert f"ID={profile.os_id}\n" in os_release(shape)


def test_node_healthy_needs_ready_and_no_lifecycle_taint() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_healthy(ready)
    assert node_healthy({**ready, "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}})
    for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"):
        assert not node_healthy({**ready, "spec": {"taints": [{"key": key, "effect": "NoExecute"}]}})
    assert not node_healthy({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not node_healthy({"status": {}})


def test_addresses_stay_unique_across_simulators_with_index_offsets() -> None:
    """Several simulator processes (index offsets 0, 10,000, ...) share one cluster: no address repeats."""
    indexes = [i for offset in range(0, MAX_NODE_INDEX + 1, 10_000) for i in range(offset, offset + 2_500)]
    indexes.append(MAX_NODE_INDEX)
    nodes = {node_ip(i) for i in indexes}
    assert len(nodes) == len(indexes)
    assert all(ipaddress.IPv4Address(a) in ipaddress.IPv4Network("172.16.0.0/12") for a in nodes)
    first, last = (pod_ip(node_index=i, slot=s) for i, s in ((0, 0), (MAX_NODE_INDEX, 253)))
    assert (first, last) == ("10.64.0.1", "10.255.255.254")
    pods = {pod_ip(node_index=i, slot=s) for i in indexes for s in (0, 253)}
    assert len(pods) == 2 * len(indexes)


def test_simulator_node_indexes_start_at_its_offset(tmp_path: Path) -> None:
    access = ClusterAccess(server="https://127.0.0.1:6443")
    simulator = Simulator(access=access, root=tmp_path, name_prefix="sim2", index_offset=20_000)
    assert (simulator.index_offset, next(simulator._counter)) == (20_000, 20_000)
    with pytest.raises(ValueError, match="index_offset"):
        Simulator(access=access, root=tmp_path, index_offset=MAX_NODE_INDEX + 1)
