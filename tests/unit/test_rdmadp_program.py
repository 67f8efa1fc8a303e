"""The RDMA shared device plugin program before it serves: config, netns mode, discovery. No sockets."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_operator.agents.rdmadp.config import RdmaConfigError, load_config
from gpu_operator.agents.rdmadp.program import Discovery, RdmaPluginError, check_netns_mode, env_flag, main
from gpu_operator.gpu.null import NullBackend
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.simulated import write_nic_tree
from gpu_operator.nic.types import NetFunction
from tests.unit.fake_context import FakeContext

CONFIG = {
    "periodicUpdateInterval": 0,
    "configList": [
        {"resourceName": "hca_ib", "rdmaHcaMax": 4, "selectors": {"linkTypes": ["infiniband"]}},
        {
            "resourceName": "hca_eth",
            "resourcePrefix": "example.com",
            "rdmaHcaMax": 2,
            "selectors": {"vendors": ["8086"]},
        },
    ],
}


class FakeNics:
    def __init__(self, functions: Sequence[NetFunction], mode: str = "unknown") -> None:
        self.list = list(functions)
        self.mode = mode

    def functions(self) -> Sequence[NetFunction]:
        return self.list

    def netlink_rdma_mode(self) -> str:
        return self.mode


def _ctx(tmp_path: Path, config: object = CONFIG, **env: str) -> FakeContext:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(reason="no GPU"), env=env)
    path = ctx.path("/k8s-rdma-shared-dev-plugin/config.json")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config), encoding="utf-8")
    return ctx


def test_env_flag() -> None:
    assert env_flag("true")
    assert env_flag(" TRUE ")
    assert env_flag("1")
    assert not env_flag(None)
    assert not env_flag("")
    assert not env_flag("false")


def test_netns_mode(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RdmaPluginError, match="exclusive network-namespace mode"):
        check_netns_mode(FakeNics([], mode="exclusive"), name="dp")
    check_netns_mode(FakeNics([], mode="shared"), name="dp")
    with caplog.at_level(logging.INFO):
        check_netns_mode(FakeNics([], mode="unknown"), name="dp")  # no NETLINK_RDMA: taken as shared
    assert "assuming shared" in caplog.text


def test_main_refuses_a_bad_config_naming_the_field(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, {"configList": [{"resourceName": "a-b", "selectors": {"vendors": ["15b3"]}}]})
    with pytest.raises(RdmaConfigError, match=r"config\.json: configList\[0\]\.resourceName"):
        asyncio.run(main(ctx))


def test_main_refuses_exclusive_mode(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    write_nic_tree(root=ctx.host_path("/"), model="cx7", count=1, netns_mode="exclusive")
    with pytest.raises(RdmaPluginError, match="exclusive"):
        asyncio.run(main(ctx))


def test_discovery_over_a_simulated_tree_writes_cdi_spec(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, RDMA_DP_USE_CDI="true")
    functions = write_nic_tree(root=ctx.host_path("/"), model="cx7", count=2)
    nics = open_nics(env={"NIC_NETLINK": "false"}, host_path=ctx.host_path)
    assert [f.address for f in nics.functions()] == [f.address for f in functions]
    config = load_config(ctx.path("/k8s-rdma-shared-dev-plugin/config.json"))
    discovery = Discovery(ctx=ctx, nics=nics, config=config, name="dp")
    ib, eth = discovery()
    assert ib.resource_name == "rdma/hca_ib"
    assert len(ib.devices()) == 4
    assert eth.resource_name == "example.com/hca_eth"
    assert list(eth.devices()) == []
    spec = json.loads(ctx.path("/var/run/cdi/nvidia.com_net-rdma.json").read_text(encoding="utf-8"))
    assert [d["name"] for d in spec["devices"]] == [f.address for f in functions]


def test_discovery_keeps_the_last_good_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx(tmp_path)
    nics = FakeNics(write_nic_tree(root=tmp_path / "tree", model="cx6dx", count=1))
    path = ctx.path("/k8s-rdma-shared-dev-plugin/config.json")
    discovery = Discovery(ctx=ctx, nics=nics, config=load_config(path), name="dp")
    assert [s.resource_name for s in discovery()] == ["rdma/hca_ib", "example.com/hca_eth"]
    path.write_text(json.dumps({"configList": [{"resourceName": "x", "devices": ["enp24s0f0np0"]}]}), encoding="utf-8")
    assert [s.resource_name for s in discovery()] == ["rdma/x"]
    path.write_text("{", encoding="utf-8")
    with caplog.at_level(logging.ERROR):
        assert [s.resource_name for s in discovery()] == ["rdma/x"]
    assert "keeping the last good config" in caplog.text
    assert discovery.config_log.failures == 1
