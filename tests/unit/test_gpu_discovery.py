"""GPU discovery without NFD: NVIDIA GPUs from a PCI tree and the OS from os-release, as node labels."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.discovery import program
from gpu_operator.agents.discovery.osrelease import parse_os_release
from gpu_operator.agents.discovery.pci import nvidia_gpus
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.localcluster.nodes.fakehost import write_pci_tree
from gpu_operator.reconcile.nodelabels import PRESENT, label_changes
from gpu_operator.render.facts import DISCOVERED_OS_ID, DISCOVERED_OS_VERSION, OS_ID, OS_VERSION, os_tag
from gpu_operator.sim.hardware import pci_functions, sysfs_address
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext, FakeNode


def _device(root: Path, address: str, *, vendor: str, pci_class: str) -> None:
    directory = root / address
    directory.mkdir(parents=True)
    (directory / "vendor").write_text(f"{vendor}\n")
    (directory / "class").write_text(f"{pci_class}\n")


def _tree(root: Path) -> Path:
    devices = root / "host" / "sys" / "bus" / "pci" / "devices"
    _device(devices, "0000:00:02.0", vendor="0x8086", pci_class="0x030000")  # an Intel VGA controller
    _device(devices, "0000:17:00.1", vendor="0x10de", pci_class="0x040300")  # NVIDIA HDMI audio: not a GPU
    _device(devices, "0000:b0:00.0", vendor="0x10de", pci_class="0x068000")  # an NVSwitch: not a GPU
    return devices


def test_only_nvidia_display_and_3d_controllers_are_gpus(tmp_path: Path) -> None:
    devices = _tree(tmp_path)
    assert nvidia_gpus(devices) == []
    _device(devices, "0000:18:00.0", vendor="0x10de", pci_class="0x030200")
    _device(devices, "0000:65:00.0", vendor="0x10DE", pci_class="0x030000")
    assert nvidia_gpus(devices) == ["0000:18:00.0", "0000:65:00.0"]
    assert nvidia_gpus(tmp_path / "absent") == []


def test_the_agent_writes_only_its_label_and_only_on_change(tmp_path: Path) -> None:
    devices = _tree(tmp_path)
    node = FakeNode(values={"kubernetes.io/os": "linux"})
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), node=node, stop_after=2)
    asyncio.run(program.main(ctx))
    assert node.values == {"kubernetes.io/os": "linux", program.DISCOVERED: "false"}
    assert node.patches == 1  # two rounds, one write
    assert ctx.ready
    _device(devices, "0000:18:00.0", vendor="0x10de", pci_class="0x030200")
    assert asyncio.run(program.discover_once(ctx))
    assert node.values[program.DISCOVERED] == "true"
    assert node.patches == 2


def test_a_fake_tree_is_read_from_the_configured_directory(tmp_path: Path) -> None:
    fake = tmp_path / "host" / "run" / "fake-sys" / "devices"
    _device(fake, "0000:3b:00.0", vendor="0x10de", pci_class="0x030200")
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"PCI_DEVICES_DIR": "/run/fake-sys/devices"})
    assert asyncio.run(program.discover_once(ctx))


def test_a_bad_interval_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="DISCOVERY_INTERVAL_SECONDS"):
        program._interval("soon")
    with pytest.raises(ValueError, match="from 1s to 24h"):
        program._interval("0")


def test_the_discovered_label_makes_a_gpu_node_without_nfd() -> None:
    spec = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": {}}).spec
    assert label_changes({program.DISCOVERED: "true"}, spec=spec)[PRESENT] == "true"
    assert PRESENT not in label_changes({program.DISCOVERED: "false"}, spec=spec)


def test_a_fake_host_tree_of_a_catalog_profile_is_what_discovery_reads(tmp_path: Path) -> None:
    devices = tmp_path / "fake" / "devices"
    write_pci_tree(devices, functions=pci_functions("dgx-h100"))
    backend = SimulatedBackend(profile=NODE_PROFILES["dgx-h100"])
    nvml_addresses = sorted(sysfs_address(d.pci_bus_id) for d in backend.devices())
    assert nvidia_gpus(devices) == nvml_addresses  # the same GPUs, at the addresses NVML reports
    assert len(nvml_addresses) == 8
    assert (devices / "0000:00:00.0" / "vendor").read_text() == "0x8086\n"  # the host bridge is not a GPU
    write_pci_tree(tmp_path / "cpu", functions=pci_functions("cpu-only"))
    assert nvidia_gpus(tmp_path / "cpu") == []


def _os_release(root: Path, text: str) -> None:
    """The Debian layout: /etc/os-release a relative link into /usr/lib."""
    (root / "host" / "usr" / "lib").mkdir(parents=True, exist_ok=True)
    (root / "host" / "usr" / "lib" / "os-release").write_text(text)
    (root / "host" / "etc").mkdir(parents=True, exist_ok=True)
    (root / "host" / "etc" / "os-release").symlink_to("../usr/lib/os-release")


def test_the_os_is_labelled_for_the_driver_tag_and_follows_the_host(tmp_path: Path) -> None:
    _tree(tmp_path)
    _os_release(tmp_path, '# comment\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    node = FakeNode(values={"kubernetes.io/os": "linux"})
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), node=node)
    asyncio.run(program.discover_once(ctx))
    assert node.values == {"kubernetes.io/os": "linux", program.DISCOVERED: "false",
                           DISCOVERED_OS_ID: "debian", DISCOVERED_OS_VERSION: "12"}  # fmt: skip
    assert os_tag(node.values) == "debian12"
    # An OS upgrade (and a field that is no label value) is followed; NFD's labels win where present.
    (tmp_path / "host" / "usr" / "lib" / "os-release").write_text("ID=rhel\nVERSION_ID=9.4\n")
    asyncio.run(program.discover_once(ctx))
    assert os_tag(node.values) == "rhel9"
    assert os_tag({**node.values, OS_ID: "ubuntu", OS_VERSION: "22.04"}) == "ubuntu22.04"
    assert parse_os_release("ID='sles'\nVERSION_ID=\"15.6\"\n") == {"ID": "sles", "VERSION_ID": "15.6"}
    (tmp_path / "host" / "usr" / "lib" / "os-release").write_text("ID=my os!\n")
    asyncio.run(program.discover_once(ctx))
    assert DISCOVERED_OS_ID not in node.values
    assert DISCOVERED_OS_VERSION not in node.values
    assert os_tag(node.values) is None
