"""The exporter program: settings, one backend reading per interval, CSV changes at run time, pods, failures."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gpu_operator.agents.exporter import program
from gpu_operator.agents.exporter.program import Exporter, Settings
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.httpserver import parse_listen
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import Sample
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices
from gpu_operator.kubelet.podresources import PodResourcesServer
from tests.unit.fake_context import FakeContext


class CountingBackend(SimulatedBackend):
    samples = 0

    def sample(self) -> Sequence[Sample]:
        self.samples += 1
        return super().sample()


def backend() -> CountingBackend:
    return CountingBackend(profile=node_profile("dgx-h100"), seed=7, node_name="node-a", clock=lambda: 1000.0)


@dataclass
class ScriptedContext(FakeContext):
    """Sleeping advances a fake clock; ``actions`` run when the clock passes their time."""

    now: float = 0.0
    until: float = 100.0
    actions: dict[float, Callable[[], None]] = field(default_factory=dict)
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float | None) -> bool:
        self.slept.append(seconds or 0.0)
        self.now += seconds or 0.0
        for at in sorted(a for a in self.actions if a <= self.now):
            self.actions.pop(at)()
        await asyncio.sleep(0)
        return self.now >= self.until


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":9400", ("", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9400", ("::1", 9400))],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DCGM_EXPORTER_LISTEN": "9400"}, "DCGM_EXPORTER_LISTEN: not an address"),
        ({"DCGM_EXPORTER_INTERVAL": "fast"}, 'DCGM_EXPORTER_INTERVAL: "fast" is not a whole number from 1 to'),
        ({"DCGM_EXPORTER_INTERVAL": "9" * 5000}, "DCGM_EXPORTER_INTERVAL: .* is not a whole number"),
        ({"DCGM_EXPORTER_INTERVAL": "\u0661\u0660"}, "DCGM_EXPORTER_INTERVAL: .* is not a whole number"),
        ({"DCGM_EXPORTER_INTERVAL": "0"}, 'DCGM_EXPORTER_INTERVAL: "0" is not a whole number from 1 to'),
        ({"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "index"}, "uid or device-name"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigRefusedError, match=words) as caught:
        Settings.from_context(FakeContext(root=tmp_path, gpu=backend(), env=env))
    assert "\n" not in str(caught.value)


def test_settings_defaults(tmp_path: Path) -> None:
    s = Settings.from_context(FakeContext(root=tmp_path, gpu=backend(), env={"NODE_NAME": "gpu-1"}))
    assert (s.host, s.port, s.interval, s.kubernetes, s.hostname) == ("", 9400, 30.0, False, "gpu-1")
    assert s.collectors is None
    no_host = Settings.from_context(FakeContext(root=tmp_path, gpu=backend(), env={"DCGM_EXPORTER_NO_HOSTNAME": "1"}))
    assert no_host.hostname is None


def test_scrapes_serve_the_cached_page_and_read_the_backend_once(tmp_path: Path) -> None:
    gpus = backend()
    ctx = FakeContext(root=tmp_path, gpu=gpus, env={"DCGM_EXPORTER_LISTEN": "127.0.0.1:0"})

    async def scenario() -> None:
        exporter = Exporter(ctx)
        await exporter.start()
        try:
            await exporter.collector.collect()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{exporter.port}") as client:
                bodies = {(await client.get("/metrics")).text for _ in range(5)}
                assert (await client.get("/health")).text == "OK\n"
                assert "/metrics" in (await client.get("/")).text
        finally:
            await exporter.close()
        assert gpus.samples == 1
        (body,) = bodies
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 8
        assert 'Hostname="node-a"' in body

    asyncio.run(scenario())


def test_counter_csv_changes_apply_at_run_time(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    csv = tmp_path / "container/etc/dcgm-exporter/dcgm-metrics.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, u\n", encoding="utf-8")
    env = {"DCGM_EXPORTER_LISTEN": "127.0.0.1:0", "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcgm-metrics.csv"}
    ctx = ScriptedContext(root=tmp_path, gpu=backend(), env=env, until=70.0)
    pages: dict[str, str] = {}
    exporter = Exporter(ctx, clock=ctx.clock)

    def change() -> None:
        pages["before"] = exporter.collector.page.body.decode()
        csv.write_text("DCGM_FI_DEV_FB_USED, gauge, used\n", encoding="utf-8")

    def break_it() -> None:
        pages["changed"] = exporter.collector.page.body.decode()
        csv.write_text("DCGM_FI_DEV_FB_USED, gauge, used\nDCGM_FI_DEV_GPU_TEMP gauge\n", encoding="utf-8")

    ctx.actions = {5.0: change, 12.5: break_it}
    with caplog.at_level(logging.INFO):
        asyncio.run(exporter.run())
    assert "DCGM_FI_DEV_GPU_UTIL{" in pages["before"]
    assert "DCGM_FI_DEV_FB_USED{" in pages["changed"]
    assert "DCGM_FI_DEV_GPU_UTIL" not in pages["changed"]
    assert "DCGM_FI_DEV_FB_USED{" in exporter.collector.page.body.decode()  # the broken file changed nothing
    assert "line 2: expected 3 fields" in caplog.text
    # Collections: at 0, on each file change (5, 12.5), then every 30 s after the last one (42.5).
    assert exporter.collector.collections == 4
    assert max(ctx.slept) <= program.CSV_CHECK_SECONDS
    assert ctx.ready


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="exp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class OnePod:
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid

    def pod_devices(self) -> Sequence[PodDevices]:
        devices = (ResourceDevices(resource_name="nvidia.com/gpu", device_ids=(self.uuid,)),)
        return [
            PodDevices(namespace="ml", name="trainer-0", containers=(ContainerDevices(name="main", devices=devices),))
        ]

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        return []


def test_pod_holding_a_gpu_is_named_on_its_series(short_dir: Path) -> None:
    gpus = backend()
    uuid = gpus.devices()[3].uuid
    env = {
        "DCGM_EXPORTER_LISTEN": "127.0.0.1:0",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_POD_RESOURCES_KUBELET_SOCKET": "/pr.sock",
    }
    ctx = FakeContext(root=short_dir, gpu=gpus, env=env)

    async def scenario() -> str:
        server = PodResourcesServer(socket=ctx.path("/pr.sock"), source=OnePod(uuid))
        await server.start()
        try:
            exporter = Exporter(ctx)
            await exporter.collector.collect()
            return exporter.collector.page.body.decode()
        finally:
            await server.stop()

    body = asyncio.run(scenario())
    util = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert [line for line in util if 'pod="trainer-0"' in line] == [
        next(line for line in util if f'UUID="{uuid}"' in line)
    ]
    assert 'gpu="3",' in next(line for line in util if "pod=" in line)
    assert ',container="main",namespace="ml",pod="trainer-0"}' in body


def test_lost_gpu_and_missing_driver(tmp_path: Path) -> None:
    gpus = backend()
    ctx = FakeContext(root=tmp_path, gpu=gpus, env={"DCGM_EXPORTER_LISTEN": "127.0.0.1:0"})

    async def scenario() -> None:
        exporter = Exporter(ctx)
        await exporter.collector.collect()
        gpus.lose_gpu(2)
        await exporter.collector.collect()
        body = exporter.collector.page.body.decode()
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 7
        assert 'gpu="2"' not in body
        assert exporter.collector.ok
        gpus.set_present(False)
        await exporter.collector.collect()
        assert exporter.collector.page.body == b""
        assert not exporter.collector.ok

    asyncio.run(scenario())


def test_main_serves_until_stopped(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=backend(), env={"DCGM_EXPORTER_LISTEN": "127.0.0.1:0"}, stop_after=3)
    asyncio.run(program.main(ctx))
    assert ctx.ready
