"""The toolkit's runtime-config edits, compared with committed expected files, for containerd v2 (in place
and drop-in), containerd v3 (its imports already cover conf.d, so only the drop-in is written; and in
place, keeping literal strings), a k3s ``config.toml.tmpl``, CRI-O and Docker.

For every case: the output equals the committed file, a second run writes nothing, and uninstalling
gives back the input byte for byte. ``GPU_OPERATOR_UPDATE_GOLDEN=1`` (``make golden``) rewrites the
expected files after a deliberate change (review the diff before committing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.null import NullBackend
from tests.unit.fake_context import FakeContext

DATA = Path(__file__).parent / "data" / "toolkit"
UPDATE = os.environ.get("GPU_OPERATOR_UPDATE_GOLDEN") == "1"


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # input file under DATA
    config: str  # host path of the main config
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)  # host path -> expected file under DATA


CASES = [
    Case(
        "containerd-v2-in-place",
        "containerd-v2-default.toml",
        "/etc/containerd/config.toml",
        {"RUNTIME": "containerd"},
        {"/etc/containerd/config.toml": "expected/containerd-v2-in-place.toml"},
    ),
    Case(
        "containerd-v2-drop-in",
        "containerd-v2-default.toml",
        "/etc/containerd/config.toml",
        {
            "RUNTIME": "containerd",
            "RUNTIME_DROP_IN_CONFIG": "/etc/containerd/conf.d/99-nvidia.toml",
            "CDI_ENABLED": "1",
        },
        {
            "/etc/containerd/config.toml": "expected/containerd-v2-drop-in.main.toml",
            "/etc/containerd/conf.d/99-nvidia.toml": "expected/containerd-v2-drop-in.99-nvidia.toml",
        },
    ),
    Case(
        "containerd-v3-imports-conf-d",
        "containerd-v3.toml",
        "/etc/containerd/config.toml",
        {"RUNTIME": "containerd", "CDI_ENABLED": "true"},
        {
            "/etc/containerd/config.toml": "containerd-v3.toml",  # covered by its own glob: untouched
            "/etc/containerd/conf.d/99-nvidia.toml": "expected/containerd-v3.99-nvidia.toml",
        },
    ),
    Case(
        "containerd-v3-in-place",
        "containerd-v3.toml",
        "/etc/containerd/config.toml",
        {"RUNTIME": "containerd", "RUNTIME_DROP_IN_CONFIG": "", "NVIDIA_RUNTIME_SET_AS_DEFAULT": "true"},
        {"/etc/containerd/config.toml": "expected/containerd-v3-in-place.toml"},
    ),
    Case(
        "k3s-template",
        "k3s-config.toml.tmpl",
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        {"RUNTIME": "containerd", "K8S_DISTRIBUTION": "k3s"},
        {"/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl": "expected/k3s-config.toml.tmpl"},
    ),
    Case(
        "crio-drop-in",
        "crio.conf",
        "/etc/crio/crio.conf",
        {"RUNTIME": "crio", "CDI_ENABLED": "true"},
        {"/etc/crio/crio.conf": "crio.conf", "/etc/crio/crio.conf.d/99-nvidia.conf": "expected/crio.99-nvidia.conf"},
    ),
    Case(
        "docker",
        "daemon.json",
        "/etc/docker/daemon.json",
        {"RUNTIME": "docker", "CDI_ENABLED": "true", "NVIDIA_RUNTIME_SET_AS_DEFAULT": "true"},
        {"/etc/docker/daemon.json": "expected/daemon.json"},
    ),
]


def _toolkit(tmp_path: Path, case: Case) -> tuple[Toolkit, FakeContext]:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(reason="golden test"), env={**case.env})
    # The restart goes to a socket that is not there: the golden tests never touch a real runtime.
    ctx.env.setdefault("RUNTIME_SOCKET", "/run/none.sock")
    config = ctx.host_path(case.config)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_bytes((DATA / case.source).read_bytes())
    return Toolkit(ctx=ctx, settings=settings_from_env(ctx.env)), ctx


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_output_matches_expected_files(tmp_path: Path, case: Case) -> None:
    toolkit, ctx = _toolkit(tmp_path, case)
    toolkit.configure()
    for host_path, expected in case.outputs.items():
        written = ctx.host_path(host_path).read_text(encoding="utf-8")
        if UPDATE and expected.startswith("expected/"):
            (DATA / expected).parent.mkdir(parents=True, exist_ok=True)
            (DATA / expected).write_text(written, encoding="utf-8")
        assert written == (DATA / expected).read_text(encoding="utf-8"), f"{host_path} differs from {expected}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_second_run_changes_nothing_and_uninstall_restores_the_input(tmp_path: Path, case: Case) -> None:
    toolkit, ctx = _toolkit(tmp_path, case)
    assert toolkit.configure(), "the first run must change something"
    stamps = {p: ctx.host_path(p).stat().st_mtime_ns for p in case.outputs}
    assert toolkit.configure() == []
    assert {p: ctx.host_path(p).stat().st_mtime_ns for p in case.outputs} == stamps

    toolkit.unconfigure()
    assert ctx.host_path(case.config).read_bytes() == (DATA / case.source).read_bytes()
    for host_path in case.outputs:
        if host_path != case.config:
            assert not ctx.host_path(host_path).exists(), f"{host_path} left behind"
    assert not toolkit.state_path.exists()
