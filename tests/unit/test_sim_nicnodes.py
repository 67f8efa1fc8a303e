"""sim.nicnodes: Mellanox NICs for a real node, written where its namespace binds them (no node started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_operator.localcluster.nodes import spec as nodespec
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.sim.nicnodes import nic_node_setup


def _spec(tmp_path: Path, setup: nodespec.NodeSetup) -> nodespec.NodeSpec:
    return nodespec.NodeSpec(
        name="real-node-2", index=2, root=tmp_path, kubelet_port=1, healthz_port=2, run_cgroup="/g",
        fake_pci=setup.fake_pci, host_overlay=setup.host_overlay, fake_kernel=setup.fake_kernel,
    )  # fmt: skip


def test_setup_binds_the_fake_pci_tree_and_overlays_dev(tmp_path: Path) -> None:
    setup = nic_node_setup(model="cx7", count=2)
    assert (setup.fake_pci, setup.host_overlay, setup.fake_kernel) == (True, True, False)
    spec = _spec(tmp_path, setup)
    script = nodespec.namespace_script(spec=spec)
    assert f"mount --bind {spec.fake_pci_devices} /sys/bus/pci/devices\n" in script
    assert f"upperdir={spec.host_overlay_root / 'dev'}," in script


def test_prepare_writes_functions_a_reader_of_the_node_sees(tmp_path: Path) -> None:
    calls: list[str] = []
    other = nodespec.NodeSetup(fake_kernel=True, prepare=lambda spec: calls.append(spec.name))
    setup = nic_node_setup(model="cx7", count=2, then=other)
    assert setup.fake_kernel
    spec = _spec(tmp_path, setup)
    assert setup.prepare is not None
    setup.prepare(spec)
    assert calls == ["real-node-2"]
    # As the node's containers see it: the tree at /sys/bus/pci/devices, the overlay's files in /dev.
    node = tmp_path / "node-view"
    (node / "sys/bus/pci").mkdir(parents=True)
    (node / "sys/bus/pci/devices").symlink_to(spec.fake_pci_devices)
    (node / "dev").symlink_to(spec.host_overlay_root / "dev")
    functions = SysfsNics(sys_root=node / "sys", dev_root=node / "dev", netlink=False).functions()
    assert [(f.device, f.is_vf) for f in functions].count(("1021", False)) == 2
    assert [f.device for f in functions if f.is_vf] == ["101e"] * 4
    assert all(f.rdma and f.rdma[0].complete for f in functions)
    if os.geteuid() == 0:  # mknod'd char devices (else empty files)
        assert (spec.host_overlay_root / "dev/infiniband/uverbs5").is_char_device()


def test_unknown_models_fail_before_any_node_starts() -> None:
    with pytest.raises(ValueError, match="unknown NIC model 'cx9'"):
        nic_node_setup(model="cx9")
    with pytest.raises(ValueError, match="NIC count 17"):
        nic_node_setup(count=17)
