"""GPU discovery's and the node-status exporter's environment."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gpu_operator.agents.discovery import program as discovery
from gpu_operator.agents.discovery.osrelease import os_labels
from gpu_operator.agents.discovery.pci import nvidia_gpus
from gpu_operator.agents.nodestatus import program as nodestatus
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    return FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=dict(env))


@pytest.mark.parametrize("text", ["inf", "nan", "1e999", "9" * 5000, "\u0666\u0660", "0.5", "2d"])
def test_bad_discovery_intervals_are_refused(text: str) -> None:
    with pytest.raises(ConfigRefusedError) as caught:
        discovery._interval(text)
    assert str(caught.value).startswith("DISCOVERY_INTERVAL_SECONDS: ")
    assert "\n" not in str(caught.value)


def test_good_discovery_values_as_before() -> None:
    assert [discovery._interval(t) for t in ("60", "1", "90s", "1h")] == [60.0, 1.0, 90.0, 3600.0]
    assert discovery.devices_dir({}) == "/sys/bus/pci/devices"
    assert discovery.devices_dir({"PCI_DEVICES_DIR": "/run/fake-sys/devices"}) == "/run/fake-sys/devices"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("DISCOVERY_INTERVAL_SECONDS", "inf"), ("PCI_DEVICES_DIR", "/sys/../../etc"), ("PCI_DEVICES_DIR", "sys")],
)
def test_discovery_stops_before_its_first_round(tmp_path: Path, variable: str, value: str) -> None:
    ctx = _ctx(tmp_path, **{variable: value})
    with pytest.raises(ConfigRefusedError, match=f"^{variable}: "):
        asyncio.run(discovery.run(ctx))
    assert ctx.node is not None
    assert ctx.node.values == {}


@pytest.mark.parametrize("text", ["inf", "nan", "-5", "\u0665", "9" * 5000, "0", "2h"])
def test_bad_status_intervals_are_refused(text: str) -> None:
    with pytest.raises(ConfigRefusedError) as caught:
        nodestatus.sleep_interval({"SLEEP_INTERVAL_SECONDS": text})
    assert str(caught.value).startswith("SLEEP_INTERVAL_SECONDS: ")
    assert "\n" not in str(caught.value)


def test_the_status_exporter_reads_good_values_and_refuses_a_bad_output_dir(tmp_path: Path) -> None:
    exporter = nodestatus.NodeStatusExporter(_ctx(tmp_path, SLEEP_INTERVAL_SECONDS="2.5", OUTPUT_DIR="/v"))
    assert exporter.interval == 2.5
    assert nodestatus.NodeStatusExporter(_ctx(tmp_path)).interval == 5.0
    with pytest.raises(ConfigRefusedError, match=r"^OUTPUT_DIR: .*'\.\.'"):
        nodestatus.NodeStatusExporter(_ctx(tmp_path, OUTPUT_DIR="/run/nvidia/../../etc"))


@pytest.mark.timeout(10)
def test_fifos_in_the_host_tree_read_as_absent_not_a_hang(tmp_path: Path) -> None:
    devices = tmp_path / "host/sys/bus/pci/devices"
    (devices / "0000:3b:00.0").mkdir(parents=True)
    (devices / "0000:3b:00.0/vendor").write_text("0x10de\n")
    os.mkfifo(devices / "0000:3b:00.0/class")
    (tmp_path / "host/etc").mkdir(parents=True)
    os.mkfifo(tmp_path / "host/etc/os-release")
    (tmp_path / "host/usr/lib").mkdir(parents=True)
    (tmp_path / "host/usr/lib/os-release").write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    writers = [
        os.open(p, os.O_RDWR | os.O_NONBLOCK)
        for p in (devices / "0000:3b:00.0/class", tmp_path / "host/etc/os-release")
    ]
    try:
        assert nvidia_gpus(devices) == []
        assert set(os_labels(tmp_path / "host").values()) == {"ubuntu", "22.04"}  # /usr/lib's, as os-release(5)
    finally:
        for fd in writers:
            os.close(fd)
