"""The runtime configs the toolkit edits on the host (Docker's daemon.json, containerd's config.toml,
CRI-O's crio.conf): content the editor cannot trust is refused with one line naming the file as the
admin knows it, and nothing on the host changes (the file keeps every byte and its mtime, no backup,
no drop-in, no state file). A good file is replaced atomically with its previous content kept as a backup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_operator.agents.shared.files import BACKUP_SUFFIX, ConfigFileError
from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext

DOCKER = "/etc/docker/daemon.json"
CONTAINERD = "/etc/containerd/config.toml"
CRIO = "/etc/crio/crio.conf"
DEEP_JSON = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
DEEP_OBJECT = b'{"runtimes": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}"
NOT_UTF8 = b'{"data-root": "/var/lib/\xff\xfedocker"}\n'

BAD = [
    # (runtime, file, content, what the one-line error says)
    ("docker", DOCKER, b'{"runtimes": {', "not valid JSON"),
    ("docker", DOCKER, b"runtimes = {}\n", "not valid JSON"),
    ("docker", DOCKER, NOT_UTF8, "not UTF-8 text"),
    ("docker", DOCKER, DEEP_JSON, "nested more than 100 levels deep"),
    ("docker", DOCKER, DEEP_OBJECT, "nested more than 100 levels deep"),
    ("docker", DOCKER, b"[]\n", "the top level must be a JSON object, not list"),
    ("docker", DOCKER, b'"runtimes"\n', "the top level must be a JSON object, not str"),
    ("docker", DOCKER, b"null\n", "the top level must be a JSON object, not NoneType"),
    ("docker", DOCKER, b"{} {}\n", "extra data after the top-level object"),
    ("docker", DOCKER, b'{"runtimes": ["nvidia"]}\n', "runtimes must be a JSON object, not list"),
    ("docker", DOCKER, b'{"features": true}\n', "features must be a JSON object, not bool"),
    ("docker", DOCKER, b'{"max-concurrent-downloads": NaN}\n', "NaN is not a JSON value"),
    ("docker", DOCKER, b'{"runtimes": {}, "runtimes": {"x": {}}}\n', 'the key "runtimes" appears twice'),
    ("docker", DOCKER, b'{"labels": ["\\ud800"]}\n', "unpaired surrogate"),
    ("containerd", CONTAINERD, b'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n', "not valid TOML"),
    ("containerd", CONTAINERD, b'{"version": 2}\n', "not valid TOML"),
    ("containerd", CONTAINERD, b'version = 2\nroot = "/var/lib/\xffcontainerd"\n', "not UTF-8 text"),
    ("containerd", CONTAINERD, b"version = 2\nx = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested more than 100"),
    ("containerd", CONTAINERD, b"version = 2\nplugins = 1\n", "plugins must be a table, not Integer"),
    ("containerd", CONTAINERD, b'version = "two"\n', "unsupported containerd config version"),
    ("containerd", CONTAINERD, b'version = 2\nimports = "/etc/x.toml"\n', "imports must be a list"),
    ("crio", CRIO, b"[crio.runtime\n", "not valid TOML"),
    ("crio", CRIO, b'[crio.runtime]\ndefault_runtime = "\xfe"\n', "not UTF-8 text"),
    ("crio", CRIO, b"[crio]\nx = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n", "nested more than 100"),
    ("crio", CRIO, b"crio = 1\n", "crio must be a table, not Integer"),
]


def _toolkit(tmp_path: Path, runtime: str, *, cdi: bool = True) -> Toolkit:
    env = {"RUNTIME": runtime, "CDI_ENABLED": "true" if cdi else "false", "NVIDIA_RUNTIME_SET_AS_DEFAULT": "true"}
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=env)
    return Toolkit(ctx=ctx, settings=settings_from_env(env))


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("runtime", "config", "content", "why"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_existing_content_is_refused_and_left_untouched(
    tmp_path: Path, runtime: str, config: str, content: bytes, why: str
) -> None:
    toolkit = _toolkit(tmp_path, runtime)
    path = toolkit.host(config)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    before = _snapshot(tmp_path)
    for step in (toolkit.configure, toolkit.unconfigure):
        with pytest.raises(ConfigFileError) as caught:
            step()
        message = str(caught.value)
        assert "\n" not in message, message
        assert message.startswith(f"{config}: "), message  # the host path, as the admin knows it
        assert why in message
        assert _snapshot(tmp_path) == before  # every byte and mtime, no backup, no drop-in, no state file


def test_a_good_daemon_json_is_replaced_atomically_with_a_backup(tmp_path: Path) -> None:
    toolkit = _toolkit(tmp_path, "docker")
    path = toolkit.host(DOCKER)
    path.parent.mkdir(parents=True)
    original = b'{\n    "log-driver": "journald",\n    "default-runtime": "runc"\n}\n'
    path.write_bytes(original)
    path.chmod(0o600)
    assert toolkit.configure() == [DOCKER]
    written = json.loads(path.read_text())
    assert written["default-runtime"] == "nvidia"
    assert written["runtimes"]["nvidia"]["path"] == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    assert written["features"] == {"cdi": True}
    assert written["log-driver"] == "journald"
    assert path.with_name("daemon.json" + BACKUP_SUFFIX).read_bytes() == original
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["daemon.json", "daemon.json" + BACKUP_SUFFIX]
    # Reverting gives the original bytes back.
    toolkit.unconfigure()
    assert path.read_bytes() == original


@pytest.mark.parametrize(
    "state",
    [b"[]", b'{"files": []}', b'{"files": {"/etc/docker/daemon.json": 1}}', b"[" * 5000 + b"]" * 5000, b"{"],
)
def test_a_mangled_state_file_is_refused_before_any_edit(tmp_path: Path, state: bytes) -> None:
    toolkit = _toolkit(tmp_path, "docker")
    path = toolkit.host(DOCKER)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"log-driver": "journald"}\n')
    toolkit.state_path.parent.mkdir(parents=True)
    toolkit.state_path.write_bytes(state)
    before = _snapshot(tmp_path)
    for step in (toolkit.configure, toolkit.unconfigure):
        with pytest.raises(ConfigFileError) as caught:
            step()
        assert "\n" not in str(caught.value)
        assert str(caught.value).startswith(f"{toolkit.state_path}: ")
        assert _snapshot(tmp_path) == before
