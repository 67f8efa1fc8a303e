"""The SR-IOV device plugin's config: text Python's JSON reader fails on, VF ranges past any NIC and long
lists are refused in one line naming the file and field; a bad reload keeps the last good pools, counted and
reported in a Node Event. Only the loader and the runner's load step run: no sockets."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.netplugin import PluginRunner
from gpu_operator.agents.sriovdp import program
from gpu_operator.agents.sriovdp.config import ConfigError, parse_config
from gpu_operator.agents.sriovdp.program import Loader
from gpu_operator.nic.simulated import SimNic, write_nic_tree
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_agentconfig_shared import Events

CONFIG = "/etc/pcidp/config.json"
POOL = {"resourcePrefix": "nvidia.com", "resourceName": "sriov_a", "selectors": {"pfNames": ["enp24s0f0np0#0-1"]}}


def _refused(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="config.json")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("config.json: ")
    assert len(message) < 300  # the input is quoted cut short, whatever its size
    return message


def _with(selectors: Any) -> str:
    return json.dumps({"resourceList": [{"resourceName": "a", "selectors": selectors}]})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "config.json: not usable JSON: nested more than 32 levels deep"),
        (_with({"vendors": ["15b3"], "x": 1}).replace("1}", "1" * 5000 + "}"), "resourceList[0].selectors.x: an"),
        (_with({"pfNames": ["p0#" + "9" * 5000]}), "selectors.pfNames[0]: 'p0#99999"),
        (_with({"pfNames": ["p0#0-70000"]}), "selectors.pfNames[0]: 'p0#0-70000': '0-70000': VF indices go from 0"),
        (_with({"vendors": ["15b3"] * 1025}), "resourceList[0].selectors.vendors: at most 1024 items, got 1025"),
        (_with([{"vendors": ["15b3"]}] * 65), "resourceList[0].selectors: at most 64 selectors, got 65"),
        (json.dumps({"resourceList": [{"resourceName": f"r{i}", "selectors": {}} for i in range(257)]}), "at most 256"),
    ],
)
def test_bad_text_and_long_lists_are_refused_in_one_line(text: str, message: str) -> None:
    assert message in _refused(text)


@dataclass
class ClusterContext(FakeContext):
    """A FakeContext with the cluster API (only its Events are used here)."""

    cluster: Any = field(default=None)


def _ctx(tmp_path: Path, resources: list[dict[str, Any]]) -> ClusterContext:
    ctx = ClusterContext(
        root=tmp_path, gpu=FakeBackend(devices=[]), env={"NIC_NETLINK": "false"}, node=None, cluster=Events()
    )
    ctx.path(CONFIG).parent.mkdir(parents=True)
    ctx.path(CONFIG).write_text(json.dumps({"resourceList": resources}), encoding="utf-8")
    write_nic_tree(root=ctx.host_path("/"), nics=[SimNic(model="cx6dx", bus=0x18, num_vfs=4)])
    return ctx


def test_a_bad_reload_keeps_the_last_good_pools(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [POOL])
    loader = Loader(ctx)
    good = loader()
    assert [(s.resource_name, len(s.devices())) for s in good] == [("nvidia.com/sriov_a", 2)]

    ctx.path(CONFIG).write_bytes(b'{"resourceList": [\xff]}')
    with pytest.raises(ConfigError, match=r"^/etc/pcidp/config\.json: not UTF-8 text \(byte 18 is 0xff\)$"):
        loader()
    assert loader.sources == good  # what the runner keeps serving
    assert loader.config_log.failures == 1


def test_the_runner_reports_a_refused_reload_in_an_event_and_keeps_going(tmp_path: Path) -> None:
    # A pool that matches no NIC: the runner starts no server, so nothing here opens a socket.
    ctx = _ctx(tmp_path, [{"resourceName": "none", "selectors": {"vendors": ["8086"]}}])
    loader = Loader(ctx)
    runner = PluginRunner(ctx=ctx, load=loader, refresh_seconds=60, name="sriov-dp", reload=loader.config_log)
    assert asyncio.run(runner.load())
    ctx.path(CONFIG).write_text(_with({"pfNames": ["p0#0-99999999"]}), encoding="utf-8")
    assert not asyncio.run(runner.load())
    assert not asyncio.run(runner.load())

    assert runner.loaded
    assert loader.config_log.failures == 1
    [(reason, message, warning)] = ctx.cluster.sent
    assert (reason, warning) == ("ConfigRefused", True)
    assert message.startswith("sriov-dp[node-a]: /etc/pcidp/config.json: resourceList[0].selectors.pfNames[0]: ")
    assert message.endswith("; keeping the last good config")


def test_a_refresh_period_that_is_not_seconds_is_refused_naming_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [POOL])
    ctx.env["SRIOV_DP_REFRESH_SECONDS"] = "nan"
    with pytest.raises(ConfigRefusedError, match=r'^SRIOV_DP_REFRESH_SECONDS: "nan" is not a number of seconds'):
        asyncio.run(program.main(ctx))
