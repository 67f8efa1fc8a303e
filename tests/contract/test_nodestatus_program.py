"""The node status exporter: gauges from the validation files and the allocatable count, over HTTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gpu_operator.agents.nodestatus import program
from gpu_operator.agents.nodestatus.program import NodeStatusExporter, render_status
from gpu_operator.agents.shared.validations import StatusDir
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext, FakeNode


@dataclass
class StatusNode(FakeNode):
    resources: dict[str, str] = field(default_factory=dict)

    async def allocatable(self) -> Mapping[str, str]:
        return dict(self.resources)


def test_render_status() -> None:
    text = render_status(ready={"driver": True, "toolkit": True, "cuda": False, "plugin": False}, devices=8)
    assert text.splitlines()[:3] == [
        "# HELP gpu_operator_node_driver_ready 1 when the driver validation passed on this node (driver-ready "
        "exists), else 0.",
        "# TYPE gpu_operator_node_driver_ready gauge",
        "gpu_operator_node_driver_ready 1",
    ]
    assert "gpu_operator_node_cuda_ready 0\n" in text
    assert text.endswith("gpu_operator_node_device_plugin_devices_total 8\n")
    no_count = render_status(ready={"driver": False, "toolkit": False, "cuda": False, "plugin": False}, devices=None)
    assert "devices_total" not in no_count


def test_served_values_follow_the_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = StatusNode(resources={"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "3"})
    env = {"NODE_STATUS_EXPORTER_LISTEN": "127.0.0.1:0"}
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env=env, node=node)
    status = StatusDir(tmp_path / "host/run/nvidia/validations")

    async def scenario() -> tuple[str, str]:
        exporter = NodeStatusExporter(ctx)
        await exporter.server.start()
        try:
            status.write("driver-ready", "IS_HOST_DRIVER=true\n")
            await exporter.refresh()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{exporter.port}") as client:
                first = (await client.get("/metrics")).text
                status.write("toolkit-ready")
                status.remove("driver-ready")
                ctx.node = FakeNode()  # no allocatable() and no PodResources socket: the count goes
                with caplog.at_level(logging.WARNING):
                    await exporter.refresh()
                    await exporter.refresh()
                second = (await client.get("/metrics")).text
                assert (await client.get("/health")).text == "OK\n"
            return first, second
        finally:
            await exporter.server.close()

    first, second = asyncio.run(scenario())
    assert "gpu_operator_node_driver_ready 1\n" in first
    assert "gpu_operator_node_toolkit_ready 0\n" in first
    assert "gpu_operator_node_device_plugin_devices_total 7\n" in first
    assert "gpu_operator_node_driver_ready 0\n" in second
    assert "gpu_operator_node_toolkit_ready 1\n" in second
    assert "devices_total" not in second
    assert caplog.text.count("device count unavailable") == 1


def test_settings(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"METRICS_PORT": "8123"})
    exporter = NodeStatusExporter(ctx)
    assert (exporter.server.host, exporter.server.requested_port) == ("", 8123)
    assert NodeStatusExporter(FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]))).server.requested_port == 8000
    with pytest.raises(ValueError, match="SLEEP_INTERVAL_SECONDS"):
        NodeStatusExporter(FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"SLEEP_INTERVAL_SECONDS": "x"}))


def test_main_runs_until_stopped(tmp_path: Path) -> None:
    env = {"NODE_STATUS_EXPORTER_LISTEN": "127.0.0.1:0"}
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env=env, node=StatusNode(), stop_after=2)
    asyncio.run(program.main(ctx))
    assert ctx.ready
