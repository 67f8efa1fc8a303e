"""The device plugin against a fake kubelet on a temporary unix socket (real gRPC, no cluster).

Covers registration, ListAndWatch (health down and back up), Allocate, GetPreferredAllocation,
re-registration after a kubelet restart, live switch to time-slicing and refusal of a bad config.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings, parse_config
from gpu_operator.gpu.types import HealthEvent
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.plugin_client import DevicePluginClient, DevicePluginError
from gpu_operator.kubelet.registration import RegistrationServer
from tests.unit.fake_backend import FakeBackend
from tests.unit.gpu_fixtures import gpu, nvswitch_links

TIME_SLICING = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"


async def _until(check: Callable[[], bool], *, timeout: float = 5.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Kubelet:
    """Just enough kubelet: a Registration server that records requests."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.registered: list[dp.RegisterRequest] = []
        self.server: RegistrationServer | None = None

    async def _on_register(self, request: dp.RegisterRequest) -> None:
        self.registered.append(request)

    async def start(self) -> None:
        self.server = RegistrationServer(plugin_dir=self.plugin_dir, on_register=self._on_register)
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def restart(self) -> None:
        assert self.server is not None
        await self.server.stop()
        for sock in self.plugin_dir.iterdir():  # the kubelet removes every socket on start
            sock.unlink()
        await self.start()


def _run(test: Callable[[Path], Awaitable[None]], tmp_path: Path) -> None:
    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    asyncio.run(asyncio.wait_for(test(plugin_dir), timeout=60))


def test_register_list_health_allocate_and_reregister(tmp_path: Path) -> None:
    async def scenario(plugin_dir: Path) -> None:
        devices = [gpu(i) for i in range(8)]
        backend = FakeBackend(devices=devices, links=nvswitch_links(8))
        config: dict[str, str] = {"text": ""}

        async def settings() -> Settings:
            return Settings.resolve(config=parse_config(text=config["text"], source="cm"), env={})

        kubelet = Kubelet(plugin_dir)
        await kubelet.start()
        plugin = DevicePlugin(backend=backend, settings=settings, plugin_dir=plugin_dir, env={}, interval=0.05)
        stop = asyncio.Event()
        task = asyncio.create_task(plugin.run(stop=stop))
        await _until(lambda: len(kubelet.registered) == 1, what="registration")
        request = kubelet.registered[0]
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "nvidia-gpu.sock",
            "nvidia.com/gpu",
        )
        assert request.options.get_preferred_allocation_available

        client = DevicePluginClient(socket=plugin_dir / "nvidia-gpu.sock", resource_name="nvidia.com/gpu")
        stream = client.list_and_watch()
        first = await anext(stream)
        assert [d.id for d in first] == [d.uuid for d in devices]
        assert all(d.healthy for d in first)

        # An XID the plugin acts on makes the device Unhealthy promptly; an ignored XID changes nothing.
        backend.emit(HealthEvent(uuid=devices[3].uuid, xid=13))
        began = time.monotonic()
        backend.emit(HealthEvent(uuid=devices[3].uuid, xid=79))
        update = await asyncio.wait_for(anext(stream), timeout=2)
        assert time.monotonic() - began < 1.0
        assert [d.id for d in update if not d.healthy] == [devices[3].uuid]
        with pytest.raises(DevicePluginError, match="unhealthy"):
            await client.allocate(device_ids=[devices[3].uuid])
        # ... and comes back when the backend reports it healthy again.
        backend.emit(HealthEvent(uuid=devices[3].uuid, recovered=True))
        recovered = await asyncio.wait_for(anext(stream), timeout=2)
        assert all(d.healthy for d in recovered)

        out = await client.allocate(device_ids=[devices[0].uuid, devices[1].uuid])
        assert out.envs["NVIDIA_VISIBLE_DEVICES"] == f"{devices[0].uuid},{devices[1].uuid}"
        preferred = await client.preferred_allocation(
            available=[d.uuid for d in devices[2:]], must_include=[devices[5].uuid], size=2
        )
        assert len(preferred) == 2
        assert devices[5].uuid in preferred
        with pytest.raises(DevicePluginError, match="unknown device"):
            await client.allocate(device_ids=["GPU-not-here"])
        await client.close()

        # Kubelet restart: sockets vanish, the plugin notices, serves again and re-registers.
        began = time.monotonic()
        await kubelet.restart()
        await _until(lambda: len(kubelet.registered) == 2, what="re-registration")
        assert time.monotonic() - began < 5
        assert (plugin_dir / "nvidia-gpu.sock").exists()

        # Live switch to time-slicing, then a bad config is refused and the old one keeps serving.
        config["text"] = TIME_SLICING
        await _until(lambda: len(kubelet.registered) == 3, what="re-registration with time-slicing")
        client = DevicePluginClient(socket=plugin_dir / "nvidia-gpu.sock", resource_name="nvidia.com/gpu")
        shared = await anext(client.list_and_watch())
        assert len(shared) == 32
        config["text"] = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}"
        await _until(lambda: plugin.last_error is not None, what="refusal")
        assert "replicas" in (plugin.last_error or "")
        assert len(kubelet.registered) == 3
        assert len(await anext(client.list_and_watch())) == 32
        await client.close()

        stop.set()
        await task
        await kubelet.stop()
        assert not (plugin_dir / "nvidia-gpu.sock").exists()

    _run(scenario, tmp_path)


def test_config_error_before_first_config_serves_nothing(tmp_path: Path) -> None:
    async def scenario(plugin_dir: Path) -> None:
        async def settings() -> Settings:
            raise ConfigError("cm: flags.migStrategy: bad")

        kubelet = Kubelet(plugin_dir)
        await kubelet.start()
        plugin = DevicePlugin(
            backend=FakeBackend(devices=[gpu(0)]), settings=settings, plugin_dir=plugin_dir, env={}, interval=0.05
        )
        stop = asyncio.Event()
        task = asyncio.create_task(plugin.run(stop=stop))
        await _until(lambda: plugin.last_error is not None, what="config error")
        assert kubelet.registered == []
        stop.set()
        await task
        await kubelet.stop()

    _run(scenario, tmp_path)
