"""RDMA shared device plugin, pure parts: selectors, advertised devices, Allocate answers, the CDI spec."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_operator.agents.rdmadp import cdi
from gpu_operator.agents.rdmadp.config import ResourceConfig, Selectors
from gpu_operator.agents.rdmadp.selectors import char_devices, if_name, select
from gpu_operator.agents.rdmadp.source import make_source
from gpu_operator.agents.shared.netplugin import AllocateError
from gpu_operator.kubelet.allocation import DeviceNodeSpec, PluginDevice, allocation_to_pb
from gpu_operator.nic.types import NetFunction, RdmaDevice


def _rdma(index: int, *, complete: bool = True) -> RdmaDevice:
    names = [f"issm{index}", "rdma_cm", f"umad{index}", f"uverbs{index}"]
    if not complete:
        names.remove(f"umad{index}")
    return RdmaDevice(
        name=f"mlx5_{index}", char_devices=tuple(f"/dev/infiniband/{n}" for n in sorted(names)), complete=complete
    )


def _fn(index: int, **fields: object) -> NetFunction:
    base = NetFunction(
        address=f"0000:{0x18 + index:02x}:00.0", vendor="15b3", device="1021", pci_class="020700",
        driver="mlx5_core", interfaces=(f"ibp{index}s0",), link_type="infiniband", rdma=(_rdma(index),),
        numa_node=0, physfn=None, vfs=(), total_vfs=0, num_vfs=0,
    )  # fmt: skip
    return replace(base, **fields)  # type: ignore[arg-type]


NODE = [
    _fn(0),
    _fn(1),
    _fn(2, device="101d", pci_class="020000", link_type="ether", interfaces=("enp2s0f0np0", "enp2s0f0v0")),
    _fn(3, vendor="8086", device="1592", driver="ice", link_type="ether", rdma=()),
    _fn(4, rdma=(_rdma(4, complete=False),)),
    _fn(5, driver="", interfaces=(), link_type=""),
]


def _config(hca_max: int = 3, **selectors: tuple[str, ...]) -> ResourceConfig:
    return ResourceConfig(name="rdma_shared_device_a", rdma_hca_max=hca_max, selectors=Selectors(**selectors))


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        ({"vendors": ("15b3",)}, [0, 1, 2, 4, 5]),
        ({"vendors": ("0x15B3",)}, [0, 1, 2, 4, 5]),  # IDs compare without case or 0x
        ({"vendors": ("15b3",), "device_ids": ("1021",)}, [0, 1, 4, 5]),
        ({"vendors": ("15b3",), "link_types": ("infiniband",)}, [0, 1, 4]),  # ANDed
        ({"link_types": ("ether",)}, [2, 3]),
        ({"drivers": ("mlx5_core",), "if_names": ("ibp1s0", "enp2s0f0np0")}, [1, 2]),
        ({"if_names": ("enp2s0f0v0",)}, []),  # only the first netdev counts, as upstream
        ({"drivers": ("ice",), "vendors": ("15b3",)}, []),
    ],
)
def test_selectors(selectors: dict[str, tuple[str, ...]], expected: list[int]) -> None:
    matched = select(NODE, Selectors(**selectors))
    assert [NODE.index(f) for f in matched] == expected


def test_if_name_and_char_devices() -> None:
    assert if_name(NODE[2]) == "enp2s0f0np0"
    assert if_name(NODE[5]) == ""
    # complete RDMA devices only; rdma_cm once though every device has it
    assert char_devices(NODE) == (
        "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0",
        "/dev/infiniband/issm1", "/dev/infiniband/umad1", "/dev/infiniband/uverbs1",
        "/dev/infiniband/issm2", "/dev/infiniband/umad2", "/dev/infiniband/uverbs2",
        "/dev/infiniband/issm5", "/dev/infiniband/umad5", "/dev/infiniband/uverbs5",
    )  # fmt: skip


def test_source_advertises_rdma_hca_max_identical_devices() -> None:
    source = make_source(config=_config(hca_max=3, link_types=("infiniband",)), functions=NODE)
    assert source.resource_name == "rdma/rdma_shared_device_a"
    assert source.endpoint == "rdma_shared_device_a.sock"
    assert list(source.devices()) == [PluginDevice(id="0"), PluginDevice(id="1"), PluginDevice(id="2")]
    assert [f.address for f in source.matched] == [NODE[0].address, NODE[1].address, NODE[4].address]


def test_allocate_gives_every_container_all_matched_hcas_rwm() -> None:
    source = make_source(config=_config(link_types=("infiniband",)), functions=NODE)
    first = source.allocate(device_ids=["0"])
    second = source.allocate(device_ids=["1", "2"])
    paths = [
        "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0",
        "/dev/infiniband/issm1", "/dev/infiniband/umad1", "/dev/infiniband/uverbs1",
    ]  # fmt: skip
    assert first.devices == tuple(DeviceNodeSpec(container_path=p, host_path=p, permissions="rwm") for p in paths)
    assert second.devices == first.devices  # shared: the same HCAs whatever the ids
    assert second.device_ids == ("1", "2")
    assert not first.envs
    assert not first.mounts
    assert not first.annotations
    assert not first.cdi_devices
    response = allocation_to_pb(first)
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices][1] == (
        "/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rwm",
    )  # fmt: skip


def test_nothing_matched_advertises_zero() -> None:
    for functions in ([], [NODE[3]], [NODE[4]]):  # no NIC, no RDMA device, an incomplete one
        source = make_source(config=_config(hca_max=63, vendors=("15b3", "8086")), functions=functions)
        assert list(source.devices()) == []
        with pytest.raises(AllocateError, match="no RDMA device matches"):
            source.allocate(device_ids=["0"])
    assert list(make_source(config=_config(hca_max=0, vendors=("15b3",)), functions=NODE).devices()) == []


def test_allocate_with_cdi_names_the_functions() -> None:
    source = make_source(config=_config(link_types=("infiniband",)), functions=NODE, use_cdi=True)
    allocation = source.allocate(device_ids=["0"])
    names = ("nvidia.com/net-rdma=0000:18:00.0", "nvidia.com/net-rdma=0000:19:00.0")
    assert allocation.cdi_devices == names
    assert allocation.annotations == {"cdi.k8s.io/nvidia.com_net-rdma": ",".join(names)}
    assert allocation.devices == ()


def test_cdi_spec_holds_each_function_once(tmp_path: Path) -> None:
    spec = cdi.build_spec([NODE[0], NODE[3], NODE[4], NODE[0], NODE[1]])
    assert spec["kind"] == "nvidia.com/net-rdma"
    assert [d["name"] for d in spec["devices"]] == ["0000:18:00.0", "0000:19:00.0"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0] == {
        "path": "/dev/infiniband/issm0", "hostPath": "/dev/infiniband/issm0", "permissions": "rw",
    }  # fmt: skip
    assert cdi.publish(spec_dir=tmp_path, functions=NODE)
    assert not cdi.publish(spec_dir=tmp_path, functions=NODE)  # unchanged: not rewritten
    written = json.loads((tmp_path / "nvidia.com_net-rdma.json").read_text(encoding="utf-8"))
    assert len(written["devices"]) == 4
    assert cdi.publish(spec_dir=tmp_path, functions=[NODE[3]])  # nothing usable: removed
    assert not (tmp_path / "nvidia.com_net-rdma.json").exists()
