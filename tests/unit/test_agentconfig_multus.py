"""Multus' inputs: a pod's ``k8s.v1.cni.cncf.io/networks`` annotation and a NAD's ``spec.config`` that
Python's JSON reader fails on (deep nesting, integers past 4300 digits), or that ask for too many networks,
are refused in one line naming the pod (or NAD), the annotation and the entry; the shim gets that line,
and the agent logs no traceback."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from gpu_operator.agents.multus.delegates import DelegateError, nad_conf
from gpu_operator.agents.multus.program import env_seconds
from gpu_operator.agents.multus.selection import MAX_NETWORKS, MultusError, parse_networks
from gpu_operator.agents.multus.service import serve_connection
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.null import NullBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_multus_agent import FakeApi, _ask, _nad, _pod, _service

WHERE = "pod team/p: annotation k8s.v1.cni.cncf.io/networks"


def _refused(text: str) -> str:
    with pytest.raises(MultusError) as caught:
        parse_networks(text, pod_namespace="team", pod_name="p")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{WHERE}: ")
    return message


def test_deep_nesting_is_refused_in_one_line() -> None:
    assert _refused("[" * 100_000 + "]" * 100_000) == f"{WHERE}: not usable JSON: nested more than 32 levels deep"


def test_a_huge_integer_is_refused_naming_the_entry_and_field() -> None:
    text = '[{"name": "mv", "cni-args": {"mtu": ' + "1" * 10_000 + "}}]"
    assert _refused(text) == f"{WHERE}: [0].cni-args.mtu: an integer of 10000 digits; no field takes more than 18"


def test_too_many_networks_are_refused_in_either_form() -> None:
    many = MAX_NETWORKS + 1
    assert f"at most {MAX_NETWORKS} networks, got {many}" in _refused(",".join(["mv"] * many))
    assert f"at most {MAX_NETWORKS} networks" in _refused(json.dumps([{"name": f"n{i}"} for i in range(many)]))


def test_ordinary_networks_still_parse_and_the_bound_is_exact() -> None:
    assert "at most" in _refused(",".join(["mv"] * (MAX_NETWORKS + 1)))
    assert len(parse_networks(",".join(["mv"] * MAX_NETWORKS), pod_namespace="team", pod_name="p")) == MAX_NETWORKS
    parsed = parse_networks('[{"name": "mv", "cni-args": {"mtu": 9000}}]', pod_namespace="team", pod_name="p")
    assert [(s.key, s.interface, dict(s.cni_args)) for s in parsed] == [("team/mv", "net1", {"mtu": 9000})]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nad team/mv: spec.config: not usable JSON: nested more than 32 levels"),
        ('{"type": "macvlan", "mtu": ' + "9" * 5000 + "}", "nad team/mv: spec.config: mtu: an integer of 5000"),
    ],
)
def test_a_nad_config_python_cannot_read_is_refused_naming_the_nad(config: str, message: str) -> None:
    nad = {"metadata": {"name": "mv", "namespace": "team"}, "spec": {"config": config}}
    with pytest.raises(DelegateError) as caught:
        nad_conf(nad, default_version="1.0.0", where="nad team/mv")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_the_shim_gets_one_line_and_the_agent_logs_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeApi({"team/p": _pod("[" * 100_000 + "]" * 100_000)}, {"team/mv": _nad("mv", "macvlan")})
    with caplog.at_level(logging.DEBUG):
        answer = _ask(_service(tmp_path, api), op="delegates", cniVersion="1.0.0", ifname="eth0")
    assert answer == {"error": f"{WHERE}: not usable JSON: nested more than 32 levels deep"}
    assert not [r for r in caplog.records if r.exc_info]


def test_a_resync_period_that_is_not_seconds_is_refused_naming_it(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(reason="no GPU"), env={"MULTUS_RESYNC_SECONDS": "1" * 5000})
    with pytest.raises(ConfigRefusedError, match=r"^MULTUS_RESYNC_SECONDS: must be a positive number of seconds"):
        env_seconds(ctx, "MULTUS_RESYNC_SECONDS", 10.0)


class _Writer:
    """The half of a connection the service writes to, in memory."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_shim_request_nested_too_deep_gets_an_answer(tmp_path: Path) -> None:
    async def scenario() -> bytes:
        reader = asyncio.StreamReader(limit=1 << 20)
        reader.feed_data(b"[" * 100_000 + b"]" * 100_000 + b"\n")
        reader.feed_eof()
        writer = _Writer()
        await serve_connection(_service(tmp_path, FakeApi({}, {})), reader, writer)  # type: ignore[arg-type]
        return writer.data

    assert json.loads(asyncio.run(scenario())) == {"error": "the request is not JSON"}
