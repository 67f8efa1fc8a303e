"""The toolkit agent on a simulated node: it installs, configures, writes the CDI spec, refreshes it when the
MIG geometry changes, reverts on exit; a corrupt config is refused, named and left untouched; settings
come from upstream's variables."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.toolkit import program
from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import SettingsError, runtime_classes, settings_from_env
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext

CONFIG = "/etc/containerd/config.toml"
SPEC = "/var/run/cdi/nvidia.com-gpu.json"


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    backend = SimulatedBackend(profile=NODE_PROFILES["a100-mig"])
    return FakeContext(root=tmp_path, gpu=backend, env={"RUNTIME": "containerd", **env})


def test_corrupt_config_is_refused_and_left_untouched(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx(tmp_path)
    config = ctx.host_path(CONFIG)
    config.parent.mkdir(parents=True)
    config.write_bytes(b'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    before = config.stat()
    ctx.stop_after = 2
    with caplog.at_level(logging.ERROR):
        asyncio.run(program.main(ctx))
    assert config.read_bytes() == b'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'
    assert config.stat().st_mtime_ns == before.st_mtime_ns
    assert not config.with_name("config.toml.gpu-operator.bak").exists()
    assert f"{CONFIG}: not valid TOML" in caplog.text  # named as the admin knows it: the host path
    assert ctx.ready is False


def test_main_configures_refreshes_and_reverts(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, CDI_ENABLED="true", CDI_REFRESH_INTERVAL="0")
    backend = ctx.gpu
    assert isinstance(backend, SimulatedBackend)
    seen: list[int] = []
    sleeps = 0

    async def sleep(seconds: float | None) -> bool:
        # Each pass: record the spec's device count; on the second, switch GPU 0 to MIG behind the agent's back.
        nonlocal sleeps
        sleeps += 1
        spec = json.loads(ctx.host_path(SPEC).read_text())
        seen.append(len(spec["devices"]))
        if sleeps == 1:
            assert ctx.ready
            assert "nvidia-cdi" in ctx.host_path(CONFIG).read_text()
            backend.set_mig_mode(0, enabled=True)
            backend.reset_gpu(0)
            backend.create_mig_devices(0, profiles=["3g.20gb", "3g.20gb"])
        await asyncio.sleep(0)
        return sleeps >= 3

    ctx.sleep = sleep  # type: ignore[method-assign]
    asyncio.run(program.main(ctx))
    assert seen == [5, 9, 9]  # 2 GPUs x (index, UUID) + all; then 2 MIG devices x 2 names more
    # Reverted on exit: the config we created from nothing is gone again, as is the PID file.
    assert not ctx.host_path(CONFIG).exists()
    assert not ctx.host_path(program.PID_FILE).exists()
    assert ctx.host_path("/usr/local/nvidia/toolkit/nvidia-container-runtime").exists()


def test_no_daemon_exits_after_configuring(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, NO_DAEMON="true")
    asyncio.run(program.main(ctx))
    assert ctx.ready
    assert "nvidia-legacy" in ctx.host_path(CONFIG).read_text()
    assert ctx.host_path(program.PID_FILE).exists()


def test_state_file_keeps_the_first_replaced_value(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, NVIDIA_RUNTIME_SET_AS_DEFAULT="true")
    config = ctx.host_path(CONFIG)
    config.parent.mkdir(parents=True)
    original = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "crun"\n'
    config.write_text(original)
    toolkit = Toolkit(ctx=ctx, settings=settings_from_env(ctx.env))
    toolkit.configure()
    toolkit.configure()
    recorded = json.loads(toolkit.state_path.read_text())["files"][CONFIG]
    assert recorded == {"default_runtime_name": "crun", "__tail__": "\n"}
    assert config.with_name("config.toml.gpu-operator.bak").read_text() == original
    toolkit.unconfigure()
    assert config.read_text() == original


def test_settings_follow_upstream_variables() -> None:
    s = settings_from_env({"RUNTIME": "containerd", "CONTAINERD_RUNTIME_CLASS": "gpu", "CDI_ENABLED": "true"})
    assert [r.name for r in s.runtimes()] == ["gpu", "gpu-cdi", "gpu-legacy"]
    assert s.default_runtime is None  # CDI: pods opt in through the RuntimeClass
    assert (s.drop_in, s.drop_in_mode) == ("/etc/containerd/conf.d/99-nvidia.toml", "if-imported")
    k3s = settings_from_env({"K8S_DISTRIBUTION": "rke2"})
    assert k3s.config == "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"
    assert (k3s.socket, k3s.template_version, k3s.drop_in) == ("/run/k3s/containerd/containerd.sock", 2, None)
    crio = settings_from_env({"RUNTIME": "crio"})
    assert (crio.drop_in, crio.restart_mode, crio.default_runtime) == (
        "/etc/crio/crio.conf.d/99-nvidia.conf",
        "systemd",
        "nvidia",
    )
    assert settings_from_env({"CONTAINERD_CONFIG": "/x/config-v3.toml.tmpl"}).template_version == 3
    for bad in ({"RUNTIME": "podman"}, {"RUNTIME_RESTART_MODE": "kill"}, {"CDI_ENABLED": "maybe"}):
        with pytest.raises(SettingsError):
            settings_from_env(bad)


def test_runtime_classes() -> None:
    assert [c["handler"] for c in runtime_classes(cdi_enabled=True)] == ["nvidia", "nvidia-cdi", "nvidia-legacy"]
    assert [c["metadata"]["name"] for c in runtime_classes(cdi_enabled=False)] == ["nvidia"]


@pytest.mark.parametrize(
    ("runtime", "config", "content"),
    [
        ("containerd", "/etc/containerd/config.toml", b"version = 2\nplugins = [\n"),
        ("crio", "/etc/crio/crio.conf", b"[crio.runtime\n"),
        ("docker", "/etc/docker/daemon.json", b'{"runtimes": {"crun": }'),
        ("containerd", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl", b'{{ template "base" . }}\n[x\n'),
    ],
)
def test_every_runtime_refuses_a_corrupt_file_and_writes_nothing(
    tmp_path: Path, runtime: str, config: str, content: bytes
) -> None:
    ctx = _ctx(tmp_path, RUNTIME=runtime, RUNTIME_CONFIG=config)
    path = ctx.host_path(config)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    toolkit = Toolkit(ctx=ctx, settings=settings_from_env(ctx.env))
    with pytest.raises(ConfigFileError) as caught:
        toolkit.configure()
    assert str(caught.value).startswith(f"{config}: ")
    assert "left untouched" in str(caught.value)
    assert path.read_bytes() == content
    written = sorted(str(p.relative_to(ctx.host_path("/"))) for p in ctx.host_path("/").rglob("*") if p.is_file())
    assert written == [config.lstrip("/")], "no backup, drop-in or state file either"
