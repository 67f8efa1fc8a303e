"""The SR-IOV device plugin's Allocate response, device-info files and CDI spec, as upstream's."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpu_operator.agents.shared.netpluginserver import AllocateError
from gpu_operator.agents.sriovdp import allocate
from gpu_operator.agents.sriovdp.allocate import PoolDevice
from gpu_operator.agents.sriovdp.config import ResourceConfig
from gpu_operator.agents.sriovdp.source import PoolSource, remove_cdi_specs
from gpu_operator.kubelet.allocation import DeviceNodeSpec, PluginDevice
from gpu_operator.nic.types import RdmaDevice

A, B, C = "0000:3b:00.2", "0000:3b:00.3", "0000:3b:00.4"


def _rdma(n: int) -> tuple[RdmaDevice, ...]:
    chars = tuple(sorted(f"/dev/infiniband/{c}" for c in ("rdma_cm", f"issm{n}", f"umad{n}", f"uverbs{n}")))
    return (RdmaDevice(name=f"mlx5_{n}", char_devices=chars, complete=True),)


POOL = {
    A: PoolDevice(address=A, numa_node=0, rdma=_rdma(2)),
    B: PoolDevice(address=B, numa_node=1, rdma=_rdma(3), vhost_net=True),
    C: PoolDevice(address=C, extra={"net": "blue"}),
}


def test_env_names_follow_upstream() -> None:
    assert allocate.env_name(prefix="intel.com", name="sriov_a") == "PCIDEVICE_INTEL_COM_SRIOV_A"
    # Only '.' becomes '_', as upstream: a prefix may hold '-' (DNS), kept; names cannot (config refuses).
    assert allocate.env_name(prefix="my-nics.example", name="b") == "PCIDEVICE_MY-NICS_EXAMPLE_B"


def test_allocate_envs_info_and_specs() -> None:
    response = allocate.allocation(prefix="nvidia.com", name="sriov_a", devices=POOL, device_ids=[B, A], use_cdi=False)
    assert response.resource_name == "nvidia.com/sriov_a"
    assert response.envs["PCIDEVICE_NVIDIA_COM_SRIOV_A"] == f"{B},{A}"
    info = response.envs["PCIDEVICE_NVIDIA_COM_SRIOV_A_INFO"]
    assert info == (  # Go's encoding: sorted keys, no spaces
        '{"0000:3b:00.2":{"generic":{"deviceID":"0000:3b:00.2"},"rdma":{"issm":"/dev/infiniband/issm2",'
        '"rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"mlx5_2","umad":"/dev/infiniband/umad2",'
        '"uverbs":"/dev/infiniband/uverbs2"}},'
        '"0000:3b:00.3":{"generic":{"deviceID":"0000:3b:00.3"},"rdma":{"issm":"/dev/infiniband/issm3",'
        '"rdma_cm":"/dev/infiniband/rdma_cm","rdma_dev":"mlx5_3","umad":"/dev/infiniband/umad3",'
        '"uverbs":"/dev/infiniband/uverbs3"},"vhost":{"net-mount":"/dev/vhost-net","tun-mount":"/dev/net/tun"}}}'
    )
    paths = [d.host_path for d in response.devices]
    assert paths == [
        "/dev/infiniband/issm3",
        "/dev/infiniband/rdma_cm",  # once, though both devices have it
        "/dev/infiniband/umad3",
        "/dev/infiniband/uverbs3",
        "/dev/vhost-net",
        "/dev/net/tun",
        "/dev/infiniband/issm2",
        "/dev/infiniband/umad2",
        "/dev/infiniband/uverbs2",
    ]
    assert all(d == DeviceNodeSpec(container_path=d.host_path, host_path=d.host_path) for d in response.devices)
    assert all(d.permissions == "rw" for d in response.devices)
    assert response.annotations == {}
    assert response.mounts == ()


def test_allocate_plain_device_and_extra_info() -> None:
    response = allocate.allocation(prefix="intel.com", name="x", devices=POOL, device_ids=[C], use_cdi=False)
    assert json.loads(response.envs["PCIDEVICE_INTEL_COM_X_INFO"]) == {
        C: {"generic": {"deviceID": C}, "extra": {"net": "blue"}}
    }
    assert response.devices == ()


def test_allocate_with_cdi_annotates_instead_of_device_specs() -> None:
    response = allocate.allocation(prefix="nvidia.com", name="sriov_a", devices=POOL, device_ids=[A, B], use_cdi=True)
    assert response.devices == ()
    assert response.annotations == {"cdi.k8s.io/nvidia.com_net-pci": f"nvidia.com/net-pci={A},nvidia.com/net-pci={B}"}
    assert response.envs["PCIDEVICE_NVIDIA_COM_SRIOV_A"] == f"{A},{B}"


def test_allocate_refuses_unknown_and_repeated_ids() -> None:
    with pytest.raises(AllocateError, match="unknown device"):
        allocate.allocation(prefix="p.io", name="x", devices=POOL, device_ids=[A, "0000:00:00.0"], use_cdi=False)
    with pytest.raises(AllocateError, match="twice"):
        allocate.allocation(prefix="p.io", name="x", devices=POOL, device_ids=[A, A], use_cdi=False)


def test_device_info_and_its_file_name() -> None:
    assert allocate.device_info(POOL[A]) == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": A, "rdma-device": "mlx5_2"},
    }
    assert allocate.device_info(POOL[C]) == {"type": "pci", "version": "1.1.0", "pci": {"pci-address": C}}
    name = allocate.devinfo_file_name(resource_name="nvidia.com/sriov_a", device_id=A)
    assert name == "nvidia.com-sriov_a-0000:3b:00.2-device.json"


def _source(tmp_path: Path, *, use_cdi: bool = False, exclude_topology: bool = False) -> PoolSource:
    resource = ResourceConfig(resource_prefix="nvidia.com", resource_name="sriov_a", exclude_topology=exclude_topology)
    return PoolSource(resource=resource, devices=list(POOL.values()), devinfo_dir=tmp_path / "dp", use_cdi=use_cdi)


def test_source_advertises_with_topology(tmp_path: Path) -> None:
    source = _source(tmp_path)
    assert source.resource_name == "nvidia.com/sriov_a"
    assert source.endpoint == "nvidia.com_sriov_a.sock"
    assert list(source.devices()) == [
        PluginDevice(id=A, numa_nodes=(0,)),
        PluginDevice(id=B, numa_nodes=(1,)),
        PluginDevice(id=C),
    ]
    assert all(d.numa_nodes == () for d in _source(tmp_path, exclude_topology=True).devices())


def test_source_allocate_writes_device_info_files(tmp_path: Path) -> None:
    source = _source(tmp_path)
    stale = source.devinfo_path(A)
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    stale.chmod(0o444)
    source.allocate(device_ids=[A, C])
    path = tmp_path / "dp" / "nvidia.com-sriov_a-0000:3b:00.2-device.json"
    assert path.read_text() == (
        '{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2","rdma-device":"mlx5_2"}}'
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert json.loads(source.devinfo_path(C).read_text())["pci"] == {"pci-address": C}
    assert not source.devinfo_path(B).exists()
    source.clean_device_info([C])
    assert path.exists()
    assert not source.devinfo_path(C).exists()
    source.clean_device_info()
    assert list((tmp_path / "dp").iterdir()) == []


def test_cdi_spec_files(tmp_path: Path) -> None:
    source = _source(tmp_path, use_cdi=True)
    assert source.write_cdi_spec(tmp_path / "cdi")
    assert not source.write_cdi_spec(tmp_path / "cdi")  # unchanged: not rewritten
    path = tmp_path / "cdi" / "sriov-dp-nvidia.com-net-pci-sriov_a.json"
    spec = json.loads(path.read_text())
    assert spec["kind"] == "nvidia.com/net-pci"
    assert [d["name"] for d in spec["devices"]] == [A, B, C]
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes[0] == {"path": "/dev/infiniband/issm2", "hostPath": "/dev/infiniband/issm2", "permissions": "rw"}
    assert spec["devices"][2]["containerEdits"]["deviceNodes"] == []
    (tmp_path / "cdi" / "nvidia.com-gpu.json").write_text("{}")
    remove_cdi_specs(tmp_path / "cdi")
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == ["nvidia.com-gpu.json"]
    remove_cdi_specs(tmp_path / "missing")
