"""Simulated nodes with Mellanox NICs: the NFD labels the network operator selects on, the OS/kernel pools its
OFED renderer groups by, the requests tests and ``gpu-operator sim up --nic-nodes`` make, and their names."""

from __future__ import annotations

import click
import pytest

from gpu_operator.cli.sim import up_requests
from gpu_operator.names.network import NIC_PRESENT
from gpu_operator.sim.nics import NIC_MODELS, NIC_POOLS, NicRequest, OsPool, nic_model, parse_os_pool
from gpu_operator.sim.objects import NFD, NIC_LABEL, node_labels
from gpu_operator.sim.shapes import NodeRequest, nic_node_requests, os_release, shape_for, shape_from_profile

POOL_KEYS = (
    f"{NFD}/system-os_release.ID",
    f"{NFD}/system-os_release.VERSION_ID",
    f"{NFD}/kernel-version.full",
    "kubernetes.io/arch",
)


def _labels(request: NodeRequest, name: str = "n") -> dict[str, str]:
    return node_labels(name=name, shape=shape_for(request))


def test_nic_only_node_has_the_mellanox_label_and_its_pool() -> None:
    request = NodeRequest(profile="cpu-only", count=1, nics=NicRequest(), os_pool=NIC_POOLS[1])
    labels = _labels(request)
    assert labels[NIC_PRESENT] == "true"
    assert f"{NFD}/pci-15b3.present" == NIC_PRESENT
    assert labels[NIC_LABEL] == "cx7"
    assert [labels[k] for k in POOL_KEYS] == ["ubuntu", "24.04", "6.8.0-40-generic", "amd64"]
    assert labels[f"{NFD}/kernel-version.major"] == "6"
    assert not any("10de" in key for key in labels)  # no GPU


def test_gpu_node_with_nics_has_both_vendors() -> None:
    labels = _labels(NodeRequest(profile="dgx-h100", count=1, nics=NicRequest(model="cx7", count=8)))
    assert labels[NIC_PRESENT] == "true"
    assert labels[f"{NFD}/pci-10de.present"] == "true"
    # Without a pool the profile's OS and kernel stay.
    assert labels[f"{NFD}/kernel-version.full"] == shape_from_profile("dgx-h100").kernel_version


def test_nodes_without_nics_have_no_mellanox_label() -> None:
    for profile in ("cpu-only", "dgx-h100"):
        labels = _labels(NodeRequest(profile=profile, count=1))
        assert NIC_PRESENT not in labels
        assert NIC_LABEL not in labels


def test_shape_for_keeps_the_profile_and_takes_the_pool() -> None:
    shape = shape_for(NodeRequest(profile="pcie-l4", count=1, nics=NicRequest(model="bf3"), os_pool=NIC_POOLS[0]))
    base = shape_from_profile("pcie-l4")
    assert (shape.gpu_count, shape.cpu_cores, shape.profile) == (base.gpu_count, base.cpu_cores, "pcie-l4")
    assert (shape.os_id, shape.os_version_id, shape.kernel_version) == ("ubuntu", "22.04", "5.15.0-105-generic")
    assert (shape.nic_model, shape.nic_count) == ("bf3", 2)
    assert 'VERSION_ID="22.04"' in os_release(shape)
    assert shape_for(NodeRequest(profile="pcie-l4", count=1)) == base


def test_nic_node_requests_split_over_two_pools() -> None:
    requests = nic_node_requests(101)
    assert [(r.count, r.os_pool) for r in requests] == [(51, NIC_POOLS[0]), (50, NIC_POOLS[1])]
    assert all(r.profile == "cpu-only" and r.nics == NicRequest() for r in requests)
    # The OFED renderer's grouping key: exactly two pools, so two DaemonSets.
    pools = {tuple(_labels(r)[k] for k in POOL_KEYS) for r in requests}
    assert len(pools) == 2
    assert all(_labels(r)[NIC_PRESENT] == "true" for r in requests)


def test_nic_node_requests_options_and_errors() -> None:
    one_pool = nic_node_requests(1)
    assert [r.count for r in one_pool] == [1]  # an empty pool is left out
    gpus = nic_node_requests(4, profile="dgx-h100", nics=NicRequest(model="cx6dx", count=4), pools=NIC_POOLS[:1])
    assert gpus == [
        NodeRequest(profile="dgx-h100", count=4, nics=NicRequest(model="cx6dx", count=4), os_pool=NIC_POOLS[0])
    ]
    with pytest.raises(ValueError, match="at least 1"):
        nic_node_requests(0)
    with pytest.raises(ValueError, match="OS pool"):
        nic_node_requests(2, pools=())
    with pytest.raises(KeyError, match="unknown node profile"):
        nic_node_requests(2, profile="nope")


def test_node_names_say_the_nic_model() -> None:
    assert NodeRequest(profile="cpu-only", count=1).name_part == "cpu-only"
    assert nic_node_requests(2)[0].name_part == "cpu-only-cx7"


def test_nic_models_and_requests() -> None:
    assert {m.name for m in NIC_MODELS.values()} >= {"ConnectX-6 Dx", "ConnectX-7", "BlueField-3"}
    assert nic_model("cx7").pci_device_id == 0x1021
    with pytest.raises(ValueError, match="unknown NIC model"):
        NicRequest(model="e1000")
    with pytest.raises(ValueError, match="at least one NIC"):
        NicRequest(count=0)


def test_parse_os_pool() -> None:
    pool = parse_os_pool("rhel:9.4:5.14.0-427.13.1.el9_4.x86_64")
    assert pool == OsPool(os_id="rhel", os_version_id="9.4", kernel_version="5.14.0-427.13.1.el9_4.x86_64")
    assert parse_os_pool(str(pool)) == pool
    for bad in ("ubuntu:22.04", "ubuntu::5.15", ""):
        with pytest.raises(ValueError, match="ID:VERSION_ID:KERNEL"):
            parse_os_pool(bad)


def test_sim_up_requests() -> None:
    requests = up_requests(spec="dgx-h100:1", nic_nodes=3, nic_profile="cpu-only", nic_model="bf3", nic_pools=())
    assert [(r.profile, r.count, r.nics, r.os_pool) for r in requests] == [
        ("dgx-h100", 1, None, None),
        ("cpu-only", 2, NicRequest(model="bf3"), NIC_POOLS[0]),
        ("cpu-only", 1, NicRequest(model="bf3"), NIC_POOLS[1]),
    ]
    custom = up_requests(
        spec="", nic_nodes=2, nic_profile="cpu-only", nic_model="cx7", nic_pools=("rhel:9.4:5.14.0-427.el9",)
    )
    assert [(r.count, str(r.os_pool)) for r in custom] == [(2, "rhel:9.4:5.14.0-427.el9")]
    with pytest.raises(click.UsageError, match="nothing to add"):
        up_requests(spec="", nic_nodes=0, nic_profile="cpu-only", nic_model="cx7", nic_pools=())
    with pytest.raises(click.BadParameter, match="ID:VERSION_ID:KERNEL"):
        up_requests(spec="", nic_nodes=1, nic_profile="cpu-only", nic_model="cx7", nic_pools=("bad",))
    with pytest.raises(click.BadParameter, match="unknown node profile"):
        up_requests(spec="", nic_nodes=1, nic_profile="nope", nic_model="cx7", nic_pools=())
