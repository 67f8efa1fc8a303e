"""Faults in each agent's API loop are retried, not fatal: the agent goes on and its work lands.

Each agent talks to :class:`~gpu_operator.kube.fakeapi.FakeApi` through its real client code
(``LightkubeNode``, ``LightkubeCluster``: lightkube, no sockets). The first two requests to the Node
(or the pod list) fail with the network failing, a slow API server, HTTP 500, 429 with Retry-After or
410 Gone; the agent's loop counts and logs them and its next round writes the label, passes the check
or sees the pods gone. ``FakeContext.sleep`` does not sleep: it counts rounds.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from gpu_operator.agents.discovery import program as discovery
from gpu_operator.agents.gfd import program as gfd
from gpu_operator.agents.migmanager import program as migmanager
from gpu_operator.agents.shared.operands import wait_for_pods_gone
from gpu_operator.agents.shared.validations import wait_until
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.kube.nodeaccess import LightkubeNode
from gpu_operator.kube.nodecluster import LightkubeCluster
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext
from tests.unit.gpu_fixtures import gpu

TIMES = 2
FAULTS: dict[str, dict[str, Any]] = {
    "ConnectError": {"error": httpx.ConnectError("connection refused")},
    "ReadTimeout": {"error": httpx.ReadTimeout("timed out")},
    "http_500": {"status": 500},
    "http_429": {"status": 429, "headers": {"Retry-After": "1"}},
    "http_410": {"status": 410},
}
NODE = "node-a"


def _api(kind: str, *, path: str = rf"^/api/v1/nodes/{NODE}") -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}}}, plural="nodes")
    api.fail(path=path, times=TIMES, **FAULTS[kind])
    return api


def _labels(api: FakeApi) -> dict[str, str]:
    node = api.get("v1", "nodes", NODE) or {}
    return dict(node["metadata"]["labels"])


@pytest.mark.parametrize("kind", FAULTS)
def test_discovery_labels_the_node_after_the_faults(kind: str, tmp_path: Path) -> None:
    devices = tmp_path / "host/sys/bus/pci/devices/0000:18:00.0"
    devices.mkdir(parents=True)
    (devices / "vendor").write_text("0x10de\n")
    (devices / "class").write_text("0x030200\n")

    async def scenario() -> None:
        api = _api(kind)
        node = LightkubeNode(name=NODE, client=api.client())
        ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), node=None, stop_after=TIMES + 1)
        ctx.node = node  # type: ignore[assignment]
        stats = await discovery.run(ctx)
        assert (stats.errors[kind], stats.passes) == (TIMES, 1)
        assert _labels(api)[discovery.DISCOVERED] == "true"
        assert ctx.ready

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_gfd_labels_the_node_after_the_faults(kind: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        api = _api(kind)
        env = {"GFD_LABEL_NODE": "true", "GFD_OUTPUT_FILE": "", "GFD_NO_TIMESTAMP": "true", "GFD_ONESHOT": "true"}
        ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[gpu(0)]), env=env, node=None)
        ctx.node = LightkubeNode(name=NODE, client=api.client())  # type: ignore[assignment]
        stats = await gfd.run(ctx)  # oneshot: until one round got through
        assert (stats.errors[kind], stats.passes) == (TIMES, 1)
        assert _labels(api)["nvidia.com/gpu.count"] == "1"

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_the_mig_manager_keeps_watching_after_the_faults(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> FakeApi:
        api = _api(kind)
        ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[gpu(0)]), node=None, stop_after=TIMES + 2)
        ctx.node = LightkubeNode(name=NODE, client=api.client())  # type: ignore[assignment]
        await migmanager.main(ctx)
        return api

    with caplog.at_level(logging.WARNING, logger="gpu_operator.runtime.periodic"):
        api = asyncio.run(scenario())
    failed = [r for r in caplog.records if f"round failed ({kind})" in r.getMessage()]
    assert len(failed) == TIMES
    reads = [p for m, p in api.requests if m == "GET" and p == f"/api/v1/nodes/{NODE}"]
    assert len(reads) > TIMES  # it went on reading the Node after the faults


@pytest.mark.parametrize("kind", FAULTS)
def test_a_validator_check_that_raises_is_polled_again(kind: str) -> None:
    async def scenario() -> bool:
        api = _api(kind)
        node = LightkubeNode(name=NODE, client=api.client())

        async def check() -> str | None:
            labels = await node.labels()  # what the plugin validation reads through the API
            return None if labels is not None else "no labels"

        async def sleep(_seconds: float | None) -> bool:
            return False

        return await wait_until(
            check, waiting_for="the check", poll=0.0, sleep=sleep, clock=lambda: 0.0, log=logging.getLogger("t")
        )

    assert asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_the_driver_manager_waits_through_the_faults(kind: str) -> None:
    async def scenario() -> list[str]:
        api = _api(kind, path=r"^/api/v1/pods")
        cluster = LightkubeCluster(node_name=NODE, client=api.client())
        clock = iter(range(1000))

        async def sleep(_seconds: float) -> bool:
            return False

        return await wait_for_pods_gone(
            cluster, apps=["nvidia-device-plugin-daemonset"], timeout=100, sleep=sleep, clock=lambda: next(clock)
        )

    assert asyncio.run(scenario()) == []  # the faults were "not yet", and then the list showed no pods


def test_a_wait_that_never_gets_an_answer_says_why() -> None:
    async def scenario() -> list[str]:
        api = FakeApi()
        api.fail(path=r"^/api/v1/pods", times=1000, status=403)
        cluster = LightkubeCluster(node_name=NODE, client=api.client())
        clock = iter(range(1000))

        async def sleep(_seconds: float) -> bool:
            return False

        return await wait_for_pods_gone(
            cluster, apps=["nvidia-device-plugin-daemonset"], timeout=3, sleep=sleep, clock=lambda: next(clock)
        )

    left = asyncio.run(scenario())
    assert left == ["app=nvidia-device-plugin-daemonset (not listed: http_403: injected fault)"]
