"""The exporter's PodMapper over a real PodResources socket: no socket yet, a served one, and one nobody serves.

Pod attribution itself (device keys, resources considered) is tested in ``tests/unit/test_exporter_pods.py``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpu_operator.agents.exporter.pods import PodMapper
from gpu_operator.kubelet.allocation import PodDevices, ResourceDevices
from gpu_operator.kubelet.podresources import PodResourcesServer
from tests.unit.test_exporter_pods import GPU0, GPU1, pod


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ex-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Source:
    def __init__(self, pods: Sequence[PodDevices]) -> None:
        self.pods = list(pods)

    def pod_devices(self) -> Sequence[PodDevices]:
        return self.pods

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        return []


def test_mapper_over_a_real_socket_keeps_the_last_answer(short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    socket = short_dir / "kubelet.sock"
    source = Source([pod("trainer", ("nvidia.com/gpu", (GPU0,)))])

    async def scenario() -> None:
        mapper = PodMapper(socket=socket, timeout=0.3)
        with caplog.at_level(logging.WARNING):
            assert await mapper.refresh() == []  # no socket yet: attribution off, said once
            assert await mapper.refresh() == []
        assert caplog.text.count("no PodResources socket") == 1

        server = PodResourcesServer(socket=socket, source=source)
        await server.start()
        try:
            assert [p.name for p in await mapper.refresh()] == ["trainer"]
            assert mapper.attribution(mig_keys={})[GPU0][0].pod == "trainer"
            source.pods.append(pod("second", ("nvidia.com/gpu", (GPU1,))))
            assert [p.name for p in await mapper.refresh()] == ["trainer", "second"]
        finally:
            await server.stop()
        socket.touch()  # a socket file nobody serves: the call fails, the last mapping stays
        with caplog.at_level(logging.WARNING):
            assert [p.name for p in await mapper.refresh()] == ["trainer", "second"]
        assert mapper.failures == 1
        assert "keeping the last pod mapping" in caplog.text

    asyncio.run(scenario())
