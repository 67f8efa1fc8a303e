"""NIC feature discovery: the pure labels, and the program setting and clearing them on the Node."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_operator.agents.nicfd import program
from gpu_operator.agents.nicfd.labels import NicView, compute_labels, label_changes, owned, sanitise
from gpu_operator.gpu.null import NullBackend
from gpu_operator.names.network import (
    MOFED_WAIT,
    NIC_FD_COUNT,
    NIC_FD_DRIVER,
    NIC_FD_ETHERNET_COUNT,
    NIC_FD_INFINIBAND_COUNT,
    NIC_FD_MOFED_VERSION,
    NIC_FD_PRODUCT,
    NIC_FD_RDMA,
    NIC_FD_RDMA_NETNS_MODE,
    NIC_FD_SRIOV_CAPABLE,
    NIC_FD_SRIOV_VFS,
)  # fmt: skip
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.simulated import SimNic, write_module_version, write_nic_tree
from gpu_operator.nic.types import NetFunction, RdmaDevice
from tests.unit.fake_context import FakeContext, FakeNode


def _fn(
    address: str, *, device: str = "1021", link: str = "infiniband", vendor: str = "15b3",
    physfn: str | None = None, total_vfs: int = 0, num_vfs: int = 0, complete: bool = True,
) -> NetFunction:  # fmt: skip
    rdma = (RdmaDevice(name="mlx5_0", char_devices=(), complete=complete),)
    return NetFunction(
        address=address, vendor=vendor, device=device, pci_class="020700", driver="mlx5_core",
        interfaces=("ib0",), link_type=link, rdma=rdma, numa_node=0, physfn=physfn, vfs=(),
        total_vfs=total_vfs, num_vfs=num_vfs,
    )  # fmt: skip


def test_labels_of_two_infiniband_ports() -> None:
    view = NicView(functions=[_fn("0000:18:00.0"), _fn("0000:40:00.0")], netns_mode="shared")
    assert compute_labels(view) == {
        NIC_FD_COUNT: "2",
        NIC_FD_PRODUCT: "ConnectX-7",
        NIC_FD_DRIVER: "mlx5_core",
        NIC_FD_INFINIBAND_COUNT: "2",
        NIC_FD_RDMA: "true",
        NIC_FD_RDMA_NETNS_MODE: "shared",
        NIC_FD_SRIOV_CAPABLE: "false",
    }


def test_vfs_other_vendors_and_mixed_products() -> None:
    functions = [
        _fn("0000:18:00.0", device="101d", link="ether", total_vfs=8, num_vfs=2, complete=False),
        _fn("0000:18:00.1", device="101d", link="ether", total_vfs=8, num_vfs=1, complete=False),
        _fn("0000:18:00.2", device="101e", link="ether", physfn="0000:18:00.0"),  # a VF: not a port
        _fn("0000:40:00.0", device="1021"),
        _fn("0000:50:00.0", vendor="8086", device="1592", link="ether"),  # an Intel NIC: not ours
    ]
    labels = compute_labels(NicView(functions=functions, driver_version="24.10-1.1.4.0"))
    assert labels[NIC_FD_COUNT] == "3"
    assert labels[NIC_FD_PRODUCT] == "ConnectX-6-Dx"
    assert (labels[NIC_FD_ETHERNET_COUNT], labels[NIC_FD_INFINIBAND_COUNT]) == ("2", "1")
    assert labels[NIC_FD_RDMA] == "true"
    assert (labels[NIC_FD_SRIOV_CAPABLE], labels[NIC_FD_SRIOV_VFS]) == ("true", "3")
    assert labels[NIC_FD_MOFED_VERSION] == "24.10-1.1.4.0"
    assert NIC_FD_RDMA_NETNS_MODE not in labels  # unknown: left out


def test_no_nics_no_labels() -> None:
    assert compute_labels(NicView(functions=[])) == {}
    assert compute_labels(NicView(functions=[_fn("0000:01:00.0", vendor="8086")])) == {}
    assert compute_labels(NicView(functions=[], driver_version="23.04-0.5.3")) == {NIC_FD_MOFED_VERSION: "23.04-0.5.3"}


def test_unknown_device_and_sanitising() -> None:
    labels = compute_labels(NicView(functions=[replace(_fn("0000:18:00.0"), device="abcd", driver="")]))
    assert labels[NIC_FD_PRODUCT] == "pci-15b3-abcd"
    assert NIC_FD_DRIVER not in labels
    assert sanitise(" ConnectX-6 Dx (rev 1)/x ") == "ConnectX-6-Dx-rev-1x"
    assert len(sanitise("x" * 100)) == 63


def test_changes_touch_only_owned_labels() -> None:
    current = {NIC_FD_SRIOV_VFS: "4", NIC_FD_COUNT: "2", MOFED_WAIT: "false", "kubernetes.io/os": "linux",
               NIC_FD_MOFED_VERSION: "23.04"}  # fmt: skip
    computed = {NIC_FD_COUNT: "2", NIC_FD_RDMA: "true"}
    assert label_changes(current=current, computed=computed) == {
        NIC_FD_RDMA: "true", NIC_FD_SRIOV_VFS: None, NIC_FD_MOFED_VERSION: None,
    }  # fmt: skip
    assert owned(NIC_FD_COUNT)
    assert owned(NIC_FD_MOFED_VERSION)
    assert not owned(MOFED_WAIT)
    assert not owned("nvidia.com/gpu.count")


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(), env={"NIC_NETLINK": "false", **env})
    ctx.node = FakeNode(values={"kubernetes.io/os": "linux", MOFED_WAIT: "false", NIC_FD_ETHERNET_COUNT: "2"})
    return ctx


def test_program_sets_and_clears_labels(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    host = ctx.host_path("/")
    write_nic_tree(root=host, nics=[SimNic(model="cx7", bus=0x18, num_vfs=0)])
    write_module_version(root=host, module="mlx5_core", version="24.10-1.1.4")
    backend = open_nics(env=ctx.env, host_path=ctx.host_path)
    labels = asyncio.run(program.publish_once(ctx, backend=backend))
    assert ctx.node is not None
    values = ctx.node.values
    assert values[NIC_FD_COUNT] == "1"
    assert values[NIC_FD_PRODUCT] == "ConnectX-7"
    assert values[NIC_FD_MOFED_VERSION] == "24.10-1.1.4"
    assert values[NIC_FD_RDMA_NETNS_MODE] == "shared"
    assert values[NIC_FD_SRIOV_VFS] == "0"  # capable, none configured
    assert NIC_FD_ETHERNET_COUNT not in values  # stale (an InfiniBand card) and removed
    assert values["kubernetes.io/os"] == "linux"
    assert values[MOFED_WAIT] == "false"
    assert {k: v for k, v in values.items() if k in labels} == labels
    patches = ctx.node.patches
    asyncio.run(program.publish_once(ctx, backend=backend))
    assert ctx.node.patches == patches  # nothing changed, nothing written
    # The NICs go away (and the MOFED driver with them): every owned label is removed.
    write_module_version(root=host, module="mlx5_core", version=None)
    for entry in (host / "sys/bus/pci/devices").iterdir():
        entry.unlink()
    asyncio.run(program.publish_once(ctx, backend=backend))
    assert ctx.node.values == {"kubernetes.io/os": "linux", MOFED_WAIT: "false"}


def test_main_loop_is_ready_after_first_pass(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, NIC_FD_INTERVAL="1m", NIC_BACKEND="null")
    ctx.stop_after = 2
    asyncio.run(program.main(ctx))
    assert ctx.ready
    assert ctx.node is not None
    assert NIC_FD_ETHERNET_COUNT not in ctx.node.values


@pytest.mark.parametrize(("text", "seconds"), [(None, 60.0), ("", 60.0), ("30", 30.0), ("1m", 60.0), ("1h30m", 5400.0),
                                               ("0.5", 0.5), ("500ms", 0.5)])  # fmt: skip
def test_parse_interval(text: str | None, seconds: float) -> None:
    assert program.parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "0", "1x"])
def test_parse_interval_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="NIC_FD_INTERVAL"):
        program.parse_interval(text)
