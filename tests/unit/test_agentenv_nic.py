"""NIC feature discovery's and the NIC backends' environment (NIC_FD_INTERVAL, NIC_*)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.nicfd import program
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.nic.types import NicError
from tests.unit.fake_context import FakeContext


def _host(node_path: str) -> Path:
    return Path("/host") / node_path.lstrip("/")


@pytest.mark.parametrize("text", ["1e999", "inf", "nan", "9" * 5000, "\u0663\u0660", "25h", "1e3"])
def test_bad_intervals_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(ConfigRefusedError) as caught:
        program.parse_interval(text)
    assert str(caught.value).startswith("NIC_FD_INTERVAL: ")
    assert "\n" not in str(caught.value)
    assert "from 100ms to 24h" in str(caught.value)


def test_good_intervals_read_as_before() -> None:
    assert [program.parse_interval(t) for t in (None, "45", "1m30s", "0.5")] == [60.0, 45.0, 90.0, 0.5]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("NIC_NETLINK", "nope", "is not true or false"),  # used to mean "netlink on"
        ("NIC_SYSFS_ROOT", "sys", "not an absolute path"),
        ("NIC_SYSFS_ROOT", "/host/../sys", "'..'"),
        ("NIC_DEV_ROOT", "/dev\nx", "control character"),
        ("NIC_BACKEND", "nvml\nx" + "y" * 5000, "unknown backend"),
    ],
)
def test_bad_nic_variables_are_refused_naming_them(variable: str, value: str, says: str) -> None:
    with pytest.raises(NicError) as caught:
        open_nics(env={variable: value}, host_path=_host)
    assert isinstance(caught.value, ConfigRefusedError)  # gpu-operator agent prints it as one line
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert says in message
    assert "\n" not in message
    assert len(message) < 200


def test_good_nic_variables_as_before() -> None:
    nics = open_nics(env={"NIC_SYSFS_ROOT": "/s", "NIC_DEV_ROOT": "/d", "NIC_NETLINK": "OFF"}, host_path=_host)
    assert isinstance(nics, SysfsNics)
    assert (nics.sys_root, nics.dev_root) == (Path("/s"), Path("/d"))
    nics._query = lambda: "exclusive"  # what the kernel would say: not asked with NIC_NETLINK off
    assert nics.netlink_rdma_mode() == "unknown"


def test_the_agent_stops_before_its_first_pass(tmp_path: Path) -> None:
    ctx = FakeContext(
        root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env={"NIC_FD_INTERVAL": "nan"}
    )
    with pytest.raises(ConfigRefusedError, match="NIC_FD_INTERVAL"):
        asyncio.run(program.run(ctx))
    assert ctx.node is not None
    assert ctx.node.values == {}
    assert not ctx.ready
