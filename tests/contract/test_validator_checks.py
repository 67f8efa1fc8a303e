"""The validator's device-plugin check falls back to the kubelet's PodResources socket when the node object
cannot say what is allocatable: no socket, a served one with NVIDIA resources, and one with none.

The other checks, and the plugin check on Node status.allocatable, are in ``tests/unit/test_validator_checks.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpu_operator.agents.validator.checks import ValidationError, check_plugin
from gpu_operator.kubelet.allocation import PodDevices, ResourceDevices
from gpu_operator.kubelet.podresources import PodResourcesServer
from tests.unit.fake_context import FakeContext, FakeNode
from tests.unit.test_validator_checks import h100


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="val-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Allocatable:
    def __init__(self, devices: Sequence[ResourceDevices]) -> None:
        self.devices = list(devices)

    def pod_devices(self) -> Sequence[PodDevices]:
        return []

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        return self.devices


def test_plugin_falls_back_to_the_kubelet(short_dir: Path) -> None:
    ctx = FakeContext(root=short_dir, gpu=h100(), node=FakeNode(), env={"POD_RESOURCES_SOCKET": "/k.sock"})
    with pytest.raises(
        ValidationError, match=r"has no allocatable\(\) and the kubelet's PodResources socket .* does not"
    ):
        asyncio.run(check_plugin(ctx))
    source = Allocatable([ResourceDevices(resource_name="nvidia.com/mig-1g.10gb", device_ids=("MIG-a", "MIG-b"))])

    async def scenario() -> str:
        server = PodResourcesServer(socket=ctx.path("/k.sock"), source=source)
        await server.start()
        try:
            return await check_plugin(ctx)
        finally:
            await server.stop()

    assert asyncio.run(scenario()).startswith("nvidia.com/mig-1g.10gb=2 allocatable (kubelet PodResources")
    source.devices = [ResourceDevices(resource_name="example.com/fpga", device_ids=("f0",))]
    with pytest.raises(ValidationError, match="no NVIDIA resource at all"):
        asyncio.run(scenario())
