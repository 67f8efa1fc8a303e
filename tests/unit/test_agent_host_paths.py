"""Host paths seen through the host root mount: symlinks resolve on the host, not in the container."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_operator.agents.host import HostContext, resolve_under
from gpu_operator.gpu.null import NullBackend


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "run" / "cdi").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")  # absolute, as on every Debian or Ubuntu host
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "loop").symlink_to("/loop")
    return tmp_path


def test_an_absolute_symlink_on_the_host_starts_again_at_the_host_root(host: Path) -> None:
    assert resolve_under(host, "/var/run/cdi/nvidia.com-gpu.json") == host / "run" / "cdi" / "nvidia.com-gpu.json"
    ctx = HostContext(gpu=NullBackend(), env={"HOST_ROOT": str(host)})
    assert ctx.host_path("/var/run/cdi") == host / "run" / "cdi"


def test_relative_links_dotdot_and_missing_parts(host: Path) -> None:
    assert resolve_under(host, "/lib/firmware/nvidia") == host / "usr" / "lib" / "firmware" / "nvidia"
    assert resolve_under(host, "/../../etc/passwd") == host / "etc" / "passwd"  # never above the root
    assert resolve_under(host, "/") == host


def test_a_symlink_loop_is_an_error_not_a_hang(host: Path) -> None:
    with pytest.raises(OSError, match="too many levels"):
        resolve_under(host, "/loop/x")
