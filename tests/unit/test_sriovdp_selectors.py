"""SR-IOV device plugin discovery and selectors: which functions each resource advertises."""

from __future__ import annotations

import json
from typing import Any

from gpu_operator.agents.sriovdp.config import Config, Selector, parse_config
from gpu_operator.agents.sriovdp.discovery import Candidate, candidates, default_route_interfaces
from gpu_operator.agents.sriovdp.selectors import build_pools, matches
from gpu_operator.nic.types import NetFunction, RdmaDevice

PF0, PF1, PLAIN = "0000:3b:00.0", "0000:3b:00.1", "0000:5e:00.0"
VFS0 = tuple(f"0000:3b:00.{i}" for i in range(2, 7))  # 5 VFs of PF0
VFS1 = ("0000:3b:01.0", "0000:3b:01.1")


def _rdma(name: str) -> tuple[RdmaDevice, ...]:
    n = name.removeprefix("mlx5_")
    chars = (
        f"/dev/infiniband/issm{n}",
        "/dev/infiniband/rdma_cm",
        f"/dev/infiniband/umad{n}",
        f"/dev/infiniband/uverbs{n}",
    )
    return (RdmaDevice(name=name, char_devices=chars, complete=True),)


def _fn(address: str, **kwargs: Any) -> NetFunction:
    values: dict[str, Any] = {
        "vendor": "15b3",
        "device": "101d",
        "pci_class": "020000",
        "driver": "mlx5_core",
        "interfaces": (),
        "link_type": "ether",
        "rdma": (),
        "numa_node": 0,
        "physfn": None,
        "vfs": (),
        "total_vfs": 0,
        "num_vfs": 0,
    }
    values.update(kwargs)
    return NetFunction(address=address, **values)


def _node() -> list[NetFunction]:
    """Two SR-IOV PFs with VFs (the second's VFs without RDMA), and a plain NIC with the default route."""
    functions = [
        _fn(PF0, interfaces=("ens1f0",), rdma=_rdma("mlx5_0"), vfs=VFS0, total_vfs=8, num_vfs=5),
        _fn(PF1, interfaces=("ens1f1",), rdma=_rdma("mlx5_1"), vfs=VFS1, total_vfs=8, num_vfs=2),
        _fn(PLAIN, vendor="8086", device="1593", driver="ice", interfaces=("eno1",)),
    ]
    functions += [
        _fn(a, device="101e", interfaces=(f"ens1f0v{i}",), rdma=_rdma(f"mlx5_{2 + i}"), physfn=PF0)
        for i, a in enumerate(VFS0)
    ]
    functions += [
        _fn(a, device="101e", driver="vfio-pci", link_type="", physfn=PF1) for a in VFS1
    ]  # bound to vfio-pci: no netdev, no RDMA
    return sorted(functions, key=lambda f: f.address)


def _config(selectors: Any, *more: dict[str, Any]) -> Config:
    resources = [{"resourceName": "a", "selectors": selectors}, *more]
    return parse_config(json.dumps({"resourceList": resources}), source="config.json")


def _pool(selectors: Any, *, default_route: frozenset[str] = frozenset()) -> list[str]:
    pools = build_pools(_config(selectors), candidates(_node(), default_route=default_route))
    return list(pools[0].addresses) if pools else []


def test_pf_with_vfs_is_skipped_and_vfs_know_their_place() -> None:
    found = {c.address: c for c in candidates(_node())}
    assert PF0 not in found
    assert PF1 not in found
    assert found[PLAIN] == Candidate(function=found[PLAIN].function, link_type="ether")
    vf = found[VFS0[3]]
    assert (vf.pf_name, vf.pf_address, vf.vf_index, vf.link_type) == ("ens1f0", PF0, 3, "ether")
    assert found[VFS1[1]].link_type == "ether"  # no netdev: the PF's link type, as upstream


def test_pf_without_vfs_is_a_candidate() -> None:
    functions = [_fn(PF0, interfaces=("ens1f0",), total_vfs=8, num_vfs=0)]
    assert [c.address for c in candidates(functions)] == [PF0]


def test_default_route_interfaces_are_skipped() -> None:
    route = (
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eno1\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "eno1\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"
        "ens1f0v1\t0000640A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
    )
    default = default_route_interfaces(route)
    assert default == {"eno1"}
    assert PLAIN in _pool({})
    assert PLAIN not in _pool({}, default_route=default)
    assert VFS0[1] in _pool({}, default_route=default)  # a route, but not the default one
    assert default_route_interfaces("") == frozenset()


def test_plain_selectors() -> None:
    assert _pool({"vendors": ["8086"]}) == [PLAIN]
    assert _pool({"devices": ["101e"], "drivers": ["vfio-pci"]}) == list(VFS1)
    assert _pool({"drivers": ["mlx5_core"], "pciAddresses": [VFS0[0], PLAIN, "0000:ff:00.0"]}) == [VFS0[0]]
    assert _pool({"vendors": ["0x15b3"]}) == []  # exact strings, as upstream compares them
    assert _pool({"linkTypes": ["infiniband"]}) == []


def test_pf_names_with_vf_ranges() -> None:
    assert _pool({"pfNames": ["ens1f0"]}) == list(VFS0)
    assert _pool({"pfNames": ["ENS1F0#0-1,4"]}) == [VFS0[0], VFS0[1], VFS0[4]]  # case-insensitive name
    assert _pool({"pfNames": ["ens1f0#3"]}) == [VFS0[3]]
    assert _pool({"pfNames": ["ens1f1#1", "ens1f0#0"]}) == [VFS0[0], VFS1[1]]
    assert _pool({"pfNames": ["eno1"]}) == []  # a function that is not a VF never matches pfNames


def test_root_devices() -> None:
    assert _pool({"rootDevices": [PF1]}) == list(VFS1)
    assert _pool({"rootDevices": [f"{PF0}#2-3"]}) == [VFS0[2], VFS0[3]]


def test_is_rdma() -> None:
    assert _pool({"isRdma": True}) == list(VFS0)  # VFS1 (vfio-pci) and the Intel NIC have no RDMA device
    selector = Selector(is_rdma=True)
    (plain,) = [c for c in candidates(_node()) if c.address == PLAIN]
    assert not matches(plain, selector)


def test_selector_list_is_a_union_and_devices_go_to_the_first_resource() -> None:
    config = _config(
        [{"pfNames": ["ens1f0#0"]}, {"rootDevices": [PF1]}, {"pfNames": ["ens1f0#0-1"]}],
        {"resourceName": "b", "selectors": {"pfNames": ["ens1f0"]}},
        {"resourceName": "empty", "selectors": {"vendors": ["1234"]}},
    )
    pools = build_pools(config, candidates(_node()))
    assert [(p.resource.resource_name, p.addresses) for p in pools] == [
        ("a", (VFS0[0], *VFS1, VFS0[1])),
        ("b", VFS0[2:]),  # VFs already in "a" are not added again; "empty" gets no pool
    ]
    assert pools[0].devices[0][1] == config.resources[0].selectors[0]  # each device keeps its selector
