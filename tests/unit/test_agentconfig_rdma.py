"""The RDMA shared device plugin's config: text Python's JSON reader fails on and unbounded counts are refused
in one line naming the file and field; a bad reload keeps the last good config serving, counted and
reported in a Node Event; a bad config at first start ends the program with that one line. No sockets."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.rdmadp.config import MAX_HCA, RdmaConfigError, load_config, parse_config
from gpu_operator.agents.rdmadp.program import Discovery, main
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.null import NullBackend
from gpu_operator.nic.simulated import write_nic_tree
from tests.unit.fake_context import FakeContext
from tests.unit.test_agentconfig_shared import Events
from tests.unit.test_rdmadp_program import FakeNics

PATH = "/k8s-rdma-shared-dev-plugin/config.json"
GOOD = {
    "periodicUpdateInterval": 0,
    "configList": [{"resourceName": "hca", "rdmaHcaMax": 4, "selectors": {"vendors": ["15b3"]}}],
}


def _refused(text: str) -> str:
    with pytest.raises(RdmaConfigError) as caught:
        parse_config(text, source="config.json")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("config.json: ")
    assert isinstance(caught.value, ConfigRefusedError)
    return message


def _with(**fields: Any) -> str:
    return json.dumps({"configList": [{"resourceName": "a", "selectors": {"vendors": ["15b3"]}, **fields}]})


def test_deep_nesting_is_refused_in_one_line() -> None:
    assert "nested more than 32 levels deep" in _refused("[" * 100_000 + "]" * 100_000)


def test_a_huge_integer_is_refused_naming_the_field() -> None:
    text = _with().replace('"resourceName"', '"rdmaHcaMax": ' + "7" * 5000 + ', "resourceName"')
    assert _refused(text) == (
        "config.json: configList[0].rdmaHcaMax: an integer of 5000 digits; no field takes more than 18"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_with(rdmaHcaMax=MAX_HCA + 1), f"configList[0].rdmaHcaMax: at most {MAX_HCA} is allowed, got {MAX_HCA + 1}"),
        (_with(rdmaHcaMax=10**17), "configList[0].rdmaHcaMax: at most"),
        (json.dumps({"periodicUpdateInterval": 10**9, "configList": []}), "periodicUpdateInterval: at most 86400"),
        (json.dumps({"configList": [{"resourceName": f"r{i}", "devices": ["x"]} for i in range(257)]}), "at most 256"),
        (_with(selectors={"ifNames": ["x"] * 1025}), "configList[0].selectors.ifNames: at most 1024 items"),
    ],
)
def test_counts_are_bounded_before_anything_is_built(text: str, message: str) -> None:
    assert message in _refused(text)


def test_the_largest_count_is_accepted_and_one_more_is_not() -> None:
    assert "rdmaHcaMax: at most" in _refused(_with(rdmaHcaMax=MAX_HCA + 1))
    assert parse_config(_with(rdmaHcaMax=MAX_HCA), source="c").resources[0].rdma_hca_max == MAX_HCA


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"configList": "\xc3"}')
    with pytest.raises(RdmaConfigError, match=r"config\.json: not UTF-8 text \(byte 16 is 0xc3\)$"):
        load_config(path)


@dataclass
class ClusterContext(FakeContext):
    """A FakeContext with the cluster API (only its Events are used here)."""

    cluster: Any = field(default=None)


def _ctx(tmp_path: Path) -> ClusterContext:
    ctx = ClusterContext(root=tmp_path, gpu=NullBackend(reason="no GPU"), cluster=Events())
    ctx.path(PATH).parent.mkdir(parents=True)
    ctx.path(PATH).write_text(json.dumps(GOOD), encoding="utf-8")
    return ctx


@pytest.mark.parametrize(
    "bad",
    [
        "[" * 100_000 + "]" * 100_000,
        json.dumps(GOOD).replace('"rdmaHcaMax": 4', '"rdmaHcaMax": ' + "9" * 5000),
        json.dumps(GOOD).replace('"rdmaHcaMax": 4', '"rdmaHcaMax": 1000000000'),
    ],
)
def test_a_bad_reload_keeps_the_last_good_config_serving_and_is_reported(tmp_path: Path, bad: str) -> None:
    ctx = _ctx(tmp_path)
    nics = FakeNics(write_nic_tree(root=tmp_path / "tree", model="cx6dx", count=1))
    discovery = Discovery(ctx=ctx, nics=nics, config=load_config(ctx.path(PATH)), name="rdma")
    assert [len(s.devices()) for s in discovery()] == [4]

    ctx.path(PATH).write_text(bad, encoding="utf-8")
    assert [len(s.devices()) for s in discovery()] == [4]  # still the good config's resource
    discovery()  # the same bad file again: not a new failure
    asyncio.run(discovery.config_log.flush())

    assert discovery.config_log.failures == 1
    [(reason, message, warning)] = ctx.cluster.sent
    assert (reason, warning) == ("ConfigRefused", True)
    assert message.startswith(f"rdma: {ctx.path(PATH)}: ")
    assert message.endswith("; keeping the last good config")


def test_a_bad_config_at_first_start_ends_the_program_with_one_line(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.path(PATH).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(RdmaConfigError) as caught:
        asyncio.run(main(ctx))
    assert str(caught.value) == f"{ctx.path(PATH)}: not usable JSON: nested more than 32 levels deep"
