"""The NIC backend: a tree written by nic.simulated read back by SysfsNics, the null backend, open_nics."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
from pathlib import Path

import pytest

from gpu_operator.nic import netlink
from gpu_operator.nic.null import NullNics
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.simulated import (
    PROFILES,
    SimNic,
    sim_nics,
    write_module_version,
    write_nic_tree,
    write_pci_nics,
)
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.nic.types import MELLANOX_PRODUCTS, DriverInfo, NetFunction, NicError
from gpu_operator.sim.nics import NIC_MODELS


def _read(root: Path) -> SysfsNics:
    return SysfsNics(sys_root=root / "sys", dev_root=root / "dev", netlink=False)


def _by_address(functions: list[NetFunction]) -> dict[str, NetFunction]:
    return {f.address: f for f in functions}


@pytest.mark.parametrize("model", sorted(NIC_MODELS))
def test_tree_reads_back_as_written(tmp_path: Path, model: str) -> None:
    written = write_nic_tree(root=tmp_path, model=model, count=2, node_index=7)
    read = _read(tmp_path).functions()
    assert read == written
    assert [f.address for f in read] == sorted(f.address for f in read)
    pfs = [f for f in read if not f.is_vf]
    assert len(pfs) == 2 * PROFILES[model].ports
    assert {f.device for f in pfs} == {f"{NIC_MODELS[model].pci_device_id:04x}"}
    assert {f.pci_class[:4] for f in read} == {NIC_MODELS[model].pci_class}


def test_profiles_follow_the_simulator_models() -> None:
    assert set(PROFILES) == set(NIC_MODELS)
    for key, prof in PROFILES.items():
        assert prof.device_id == f"{NIC_MODELS[key].pci_device_id:04x}"
        assert prof.pci_class.startswith(NIC_MODELS[key].pci_class)
        assert MELLANOX_PRODUCTS[prof.device_id] == NIC_MODELS[key].name == prof.name


def test_pfs_and_vfs_are_linked_both_ways(tmp_path: Path) -> None:
    functions = _by_address(write_nic_tree(root=tmp_path, model="cx6dx", count=1))
    read = _by_address(_read(tmp_path).functions())
    pf = read["0000:18:00.0"]
    assert (pf.total_vfs, pf.num_vfs, pf.link_type, pf.driver) == (8, 2, "ether", "mlx5_core")
    assert pf.vfs == ("0000:18:00.2", "0000:18:00.3")
    assert read["0000:18:00.1"].vfs == ("0000:18:01.2", "0000:18:01.3")  # PF1's VFs follow PF0's total
    for vf_address in pf.vfs:
        vf = read[vf_address]
        assert vf.is_vf
        assert vf.physfn == pf.address
        assert vf.device == "101e"
        assert vf.interfaces
        assert vf.rdma
        assert vf.rdma[0].complete
        assert (vf.total_vfs, vf.num_vfs, vf.vfs) == (0, 0, ())
    assert read == functions
    # sysfs's links are relative: the tree can move and still read the same.
    link = tmp_path / "sys/bus/pci/devices/0000:18:00.0"
    assert not os.readlink(link).startswith("/")
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    shutil.move(tmp_path, moved)
    assert _read(moved).functions() == list(functions.values())


def test_link_types_and_interface_names(tmp_path: Path) -> None:
    nics = [SimNic(model="cx7", bus=0x18), SimNic(model="bf3", bus=0x9A, numa_node=1)]
    read = _by_address(write_nic_tree(root=tmp_path, nics=nics))
    assert read["0000:18:00.0"].link_type == "infiniband"
    assert read["0000:18:00.0"].interfaces == ("ibp24s0",)
    assert read["0000:9a:00.1"].link_type == "ether"
    assert read["0000:9a:00.1"].interfaces == ("enp154s0f1np1",)
    assert read["0000:9a:00.1"].numa_node == 1
    assert (tmp_path / "sys/class/net/ibp24s0/type").read_text() == "32\n"
    assert (tmp_path / "sys/class/net/enp154s0f1np1/type").read_text() == "1\n"


def test_rdma_char_devices(tmp_path: Path) -> None:
    write_nic_tree(root=tmp_path, model="cx6", count=1)
    (fn,) = _read(tmp_path).functions()
    (dev,) = fn.rdma
    assert dev.name == "mlx5_0"
    assert dev.char_devices == (
        "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad0", "/dev/infiniband/uverbs0",
    )  # fmt: skip
    assert dev.complete
    (tmp_path / "dev/infiniband/umad0").unlink()
    (dev,) = _read(tmp_path).functions()[0].rdma
    assert not dev.complete
    assert "/dev/infiniband/umad0" not in dev.char_devices


def test_missing_files_are_tolerated(tmp_path: Path) -> None:
    write_nic_tree(root=tmp_path, model="bf3", count=1)
    fn_dir = tmp_path / "sys/bus/pci/devices/0000:18:00.0"
    for name in ("driver", "numa_node", "sriov_totalvfs", "sriov_numvfs"):
        (fn_dir / name).unlink()
    shutil.rmtree(fn_dir / "net")
    shutil.rmtree(fn_dir / "infiniband")
    shutil.rmtree(tmp_path / "sys/class/infiniband_mad")
    other = tmp_path / "sys/bus/pci/devices/0000:00:1f.0"  # not a network function: skipped
    other.mkdir()
    (other / "class").write_text("0x060100\n")
    fn = _by_address(_read(tmp_path).functions())["0000:18:00.0"]
    assert (fn.driver, fn.interfaces, fn.link_type, fn.rdma, fn.numa_node) == ("", (), "", (), None)
    assert (fn.total_vfs, fn.num_vfs, fn.vfs) == (0, 0, ())
    assert [f.address for f in _read(tmp_path).functions()] == ["0000:18:00.0", "0000:18:00.1"]
    assert _read(tmp_path / "nothing").functions() == []


def test_class_views_are_links_into_the_function_directories(tmp_path: Path) -> None:
    write_nic_tree(root=tmp_path, model="cx7", count=1)
    function = "../../devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert os.readlink(tmp_path / "sys/class/infiniband_verbs/uverbs0") == f"{function}/infiniband_verbs/uverbs0"
    assert os.readlink(tmp_path / "sys/class/infiniband_mad/issm0") == f"{function}/infiniband_mad/issm0"
    assert os.readlink(tmp_path / "sys/class/net/ibp24s0") == f"{function}/net/ibp24s0"
    assert os.path.basename(os.readlink(tmp_path / "sys/class/infiniband/mlx5_0/device")) == "0000:18:00.0"


def test_a_tree_of_function_directories_alone_reads_fully(tmp_path: Path) -> None:
    """A real node's fake /sys/bus/pci/devices: no /sys/class, everything from the function directories."""
    whole = write_nic_tree(root=tmp_path / "whole", model="cx7", count=2, node_index=3)
    devices, dev = tmp_path / "node/sys/bus/pci/devices", tmp_path / "node/dev"
    flat = write_pci_nics(devices=devices, dev_root=dev, model="cx7", count=2, node_index=3, mknod=False)
    assert flat == whole
    assert not (tmp_path / "node/sys/class").exists()
    assert sorted(p.name for p in devices.iterdir()) == sorted(f.address for f in flat)
    assert all(p.is_dir() and not p.is_symlink() for p in devices.iterdir())  # functions as real directories
    assert os.readlink(devices / "0000:18:00.0/virtfn1") == "../0000:18:00.2"
    assert os.readlink(devices / "0000:18:00.2/physfn") == "../0000:18:00.0"
    # Resolvable inside the function (no /sys/bus/pci/drivers on a node without the driver); its name is read.
    assert os.readlink(devices / "0000:18:00.0/driver") == ".driver/mlx5_core"
    assert (devices / "0000:18:00.0/driver").resolve().is_dir()
    read = _read(tmp_path / "node").functions()
    assert read == flat
    pf = _by_address(read)["0000:40:00.0"]
    assert (pf.link_type, pf.driver, pf.vfs) == ("infiniband", "mlx5_core", ("0000:40:00.1", "0000:40:00.2"))
    assert pf.rdma[0].name == "mlx5_1"
    assert pf.rdma[0].char_devices == (
        "/dev/infiniband/issm1", "/dev/infiniband/rdma_cm", "/dev/infiniband/umad1", "/dev/infiniband/uverbs1",
    )  # fmt: skip
    # The same reader under a whole tree whose function directories lack the entries: /sys/class serves.
    fn_dir = tmp_path / "whole/sys/bus/pci/devices/0000:18:00.0"
    for cls in ("infiniband_verbs", "infiniband_mad"):
        for entry in (fn_dir / cls).iterdir():
            class_entry = tmp_path / "whole/sys/class" / cls / entry.name
            class_entry.unlink()
            shutil.copytree(entry, class_entry)
        shutil.rmtree(fn_dir / cls)
    (fn_dir / "net/ibp24s0/type").unlink()
    (tmp_path / "whole/sys/class/net/ibp24s0").unlink()
    (tmp_path / "whole/sys/class/net/ibp24s0").mkdir()
    (tmp_path / "whole/sys/class/net/ibp24s0/type").write_text("32\n")
    ib_dir = tmp_path / "whole/sys/class/infiniband/mlx5_0"
    ib_dir.unlink()
    shutil.move(fn_dir / "infiniband/mlx5_0", ib_dir)
    (ib_dir / "device").unlink()  # moved along with the RDMA device: point it at the function again
    os.symlink("../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0", ib_dir / "device")
    assert _read(tmp_path / "whole").functions() == whole


def test_pci_nics_make_char_devices(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    write_pci_nics(devices=tmp_path / "devices", dev_root=tmp_path / "dev", model="cx7", count=1)
    uverbs = os.stat(tmp_path / "dev/infiniband/uverbs0")
    assert stat.S_ISCHR(uverbs.st_mode)
    assert (os.major(uverbs.st_rdev), os.minor(uverbs.st_rdev)) == (231, 192)
    rdma_cm = os.stat(tmp_path / "dev/infiniband/rdma_cm")
    assert stat.S_ISCHR(rdma_cm.st_mode)
    assert os.major(rdma_cm.st_rdev) == 10


def test_module_version_and_netns_mode(tmp_path: Path) -> None:
    write_nic_tree(root=tmp_path, model="cx7", count=1, netns_mode="exclusive")
    nics = SysfsNics(sys_root=tmp_path / "sys", dev_root=tmp_path / "dev", query=lambda: "shared")
    assert isinstance(nics, DriverInfo)
    assert nics.module_version("mlx5_core") is None  # inbox: loaded, no version file
    write_module_version(root=tmp_path, module="mlx5_core", version="24.10-1.1.4")
    assert nics.module_version("mlx5_core") == "24.10-1.1.4"
    assert nics.netlink_rdma_mode() == "exclusive"  # the simulated tree's own answer, not the kernel's
    (tmp_path / "etc/simulated-nic/netns-mode").unlink()
    assert nics.netlink_rdma_mode() == "shared"  # the kernel's answer
    assert _read(tmp_path).netlink_rdma_mode() == "exclusive"  # ib_core's netns_mode parameter: N
    (tmp_path / "sys/module/ib_core/parameters/netns_mode").unlink()
    assert _read(tmp_path).netlink_rdma_mode() == "unknown"


def test_netlink_mode_never_raises(tmp_path: Path) -> None:
    def refused() -> netlink.NetlinkSocket:
        raise OSError(errno.EPROTONOSUPPORT, "Protocol not supported")

    def broken() -> str | None:
        raise RuntimeError("boom")

    assert netlink.query_netns_mode(open_socket=refused) is None
    nics = SysfsNics(sys_root=tmp_path / "sys", dev_root=tmp_path / "dev", query=broken)
    assert nics.netlink_rdma_mode() == "unknown"
    nics = SysfsNics(sys_root=tmp_path / "sys", dev_root=tmp_path / "dev",
                     query=lambda: netlink.query_netns_mode(open_socket=refused))  # fmt: skip
    assert nics.netlink_rdma_mode() == "unknown"


class _FakeSocket:
    def __init__(self, reply: bytes) -> None:
        self.reply, self.sent, self.closed = reply, b"", False

    def settimeout(self, value: float | None, /) -> None:
        pass

    def sendto(self, data: bytes, address: tuple[int, int], /) -> int:
        self.sent = data
        return len(data)

    def recv(self, size: int, /) -> bytes:
        return self.reply

    def close(self) -> None:
        self.closed = True


def _reply(mode: int) -> bytes:
    attr = struct.pack("=HHB3x", 5, netlink.RDMA_NLDEV_SYS_ATTR_NETNS_MODE, mode)
    return struct.pack("=IHHII", 16 + len(attr), netlink.SYS_GET_TYPE, 0, 1, 0) + attr


@pytest.mark.parametrize(("mode", "name"), [(1, "shared"), (0, "exclusive")])
def test_netlink_reply_is_parsed(mode: int, name: str) -> None:
    sock = _FakeSocket(_reply(mode))
    assert netlink.query_netns_mode(open_socket=lambda: sock) == name
    assert sock.closed
    assert struct.unpack_from("=IHH", sock.sent) == (16, (5 << 10) + 6, 0x5)


def test_netlink_error_and_garbage_are_none() -> None:
    error = struct.pack("=IHHII", 36, netlink.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -95) + bytes(16)
    assert netlink.parse_netns_mode(error) is None
    assert netlink.parse_netns_mode(b"\x01\x02") is None
    assert netlink.parse_netns_mode(struct.pack("=IHHII", 999, netlink.SYS_GET_TYPE, 0, 1, 0)) is None


def test_null_backend() -> None:
    nics = NullNics()
    assert nics.functions() == []
    assert nics.netlink_rdma_mode() == "unknown"
    assert nics.module_version("mlx5_core") is None


def test_open_nics_env(tmp_path: Path) -> None:
    def host_path(node_path: str) -> Path:
        return tmp_path / "host" / node_path.lstrip("/")

    assert isinstance(open_nics(env={"NIC_BACKEND": "null"}, host_path=host_path), NullNics)
    default = open_nics(env={}, host_path=host_path)
    assert isinstance(default, SysfsNics)
    assert (default.sys_root, default.dev_root) == (tmp_path / "host/sys", tmp_path / "host/dev")
    env = {"NIC_SYSFS_ROOT": str(tmp_path / "s"), "NIC_DEV_ROOT": str(tmp_path / "d"), "NIC_NETLINK": "false"}
    custom = open_nics(env=env, host_path=host_path)
    assert isinstance(custom, SysfsNics)
    assert (custom.sys_root, custom.dev_root) == (tmp_path / "s", tmp_path / "d")
    with pytest.raises(NicError, match="NIC_BACKEND: unknown backend 'nvml'"):
        open_nics(env={"NIC_BACKEND": "nvml"}, host_path=host_path)


def test_writer_is_deterministic_and_rewritable(tmp_path: Path) -> None:
    first = write_nic_tree(root=tmp_path / "a", model="cx7", count=2, node_index=3)
    again = write_nic_tree(root=tmp_path / "a", model="cx7", count=2, node_index=3)  # a node re-registering
    other = write_nic_tree(root=tmp_path / "b", nics=sim_nics(model="cx7", count=2), node_index=3)
    assert first == again == other == _read(tmp_path / "a").functions()
    guid = (tmp_path / "a/sys/class/infiniband/mlx5_0/node_guid").read_text()
    write_nic_tree(root=tmp_path / "c", model="cx7", count=2, node_index=4)
    assert (tmp_path / "c/sys/class/infiniband/mlx5_0/node_guid").read_text() != guid  # unique per node


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown NIC model 'cx9'"):
        write_nic_tree(root=tmp_path, model="cx9", count=1)
    with pytest.raises(ValueError, match="num_vfs 99 out of range"):
        write_nic_tree(root=tmp_path, nics=[SimNic(model="cx7", bus=0x18, num_vfs=99)])
    with pytest.raises(ValueError, match="NIC buses must be distinct"):
        write_nic_tree(root=tmp_path, nics=[SimNic(model="cx7", bus=0x18), SimNic(model="bf3", bus=0x18)])
    with pytest.raises(ValueError, match="NIC count 17"):
        sim_nics(model="cx7", count=17)
