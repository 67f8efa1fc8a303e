"""GFD's environment: good values read as before, bad ones refused in one line naming the variable."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_operator.agents.gfd import program
from gpu_operator.agents.gfd.vgpu import read_vgpu
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.cli import agent
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext


def test_defaults_and_good_values_are_as_before() -> None:
    assert program.settings_from_env({}) == program.GfdSettings()
    env = {
        "GFD_SLEEP_INTERVAL": "1m30s",
        "GFD_ONESHOT": "true",
        "GFD_NO_TIMESTAMP": "1",
        "GFD_LABEL_NODE": "yes",
        "GFD_OUTPUT_FILE": "",
        "GFD_MACHINE_TYPE_FILE": "/host/product_name",
        "NAMESPACE": "gpu-operator",
    }
    s = program.settings_from_env(env)
    assert (s.interval, s.oneshot, s.no_timestamp, s.label_node, s.output) == (90.0, True, True, True, "")
    assert (s.machine_file, s.namespace) == ("/host/product_name", "gpu-operator")
    assert program.settings_from_env({"GFD_SLEEP_INTERVAL": "infinite"}).interval is None
    assert program.settings_from_env({"OPERATOR_NAMESPACE": "ops"}).namespace == "ops"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("GFD_SLEEP_INTERVAL", "1e999s", "is not a duration from 100ms to 24h"),
        ("GFD_SLEEP_INTERVAL", "9" * 5000 + "s", "is not a duration"),
        ("GFD_SLEEP_INTERVAL", "\u0666\u0660s", "is not a duration"),
        ("GFD_SLEEP_INTERVAL", "0s", "is not a duration"),  # used to spin: a round every 0 s
        ("GFD_SLEEP_INTERVAL", "60", "is not a duration"),  # Go's durations need a unit
        ("GFD_ONESHOT", "maybe", "is not true or false"),
        ("GFD_LABEL_NODE", "ture", "is not true or false"),
        ("GFD_USE_NODE_FEATURE_API", "enabled", "is not true or false"),
        ("GFD_MACHINE_TYPE_FILE", "/sys/../etc/shadow", "'..'"),
        ("GFD_OUTPUT_FILE", "features.d/gfd", "not an absolute path"),
        ("GFD_PCI_DEVICES_DIR", "/sys/bus/pci/devices\n", "control character"),
        ("NAMESPACE", "Gpu_Operator", "is not a namespace name"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigRefusedError) as caught:
        program.settings_from_env({variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert says in message
    assert "\n" not in message
    assert len(message) < 200


def test_a_refused_value_stops_the_loop_before_anything_is_written(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]),
                      env={"GFD_SLEEP_INTERVAL": "inf"})  # fmt: skip
    with pytest.raises(ConfigRefusedError, match="GFD_SLEEP_INTERVAL"):
        asyncio.run(program.run(ctx))
    assert not any(tmp_path.rglob("*"))
    assert not ctx.ready


def test_the_machine_type_file_is_read_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert program.read_machine_type(fifo) == "unknown"  # not opened: a FIFO would block GFD for ever
    odd = tmp_path / "product_name"
    odd.write_bytes(b"DGX \xff H100\nsecond line\n")
    assert program.read_machine_type(odd) == "DGX \ufffd H100"
    assert program.read_machine_type(tmp_path / "missing") == "unknown"


def test_gpu_operator_agent_prints_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setenv("GFD_SLEEP_INTERVAL", "1e999s")
    result = CliRunner().invoke(agent.agent_command, ["feature-discovery", "--gpu-backend", "null"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        'Error: agent feature-discovery: GFD_SLEEP_INTERVAL: "1e999s" is not a duration from 100ms to 24h or "infinite"'
    ]


@pytest.mark.timeout(10)
def test_a_fifo_in_the_pci_tree_reads_as_unreadable_not_a_hang(tmp_path: Path) -> None:
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "vendor").write_text("0x10de\n")
    os.mkfifo(device / "config")
    writer = os.open(device / "config", os.O_RDWR | os.O_NONBLOCK)  # a writer that never closes: read() would wait
    try:
        assert read_vgpu(tmp_path) is None
    finally:
        os.close(writer)
