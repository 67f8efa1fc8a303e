"""The stand-in for NVIDIA's driver image (``sim.fakedriver.standin``): how it finds its node, which
version it installs and what it hands the driver agent; on a fake ``/proc``, without mounting."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpu_operator.sim.fakedriver.container import FakeDriverError
from gpu_operator.sim.fakedriver.standin import agent_env, installer_version, node_pid


def _process(proc: Path, pid: int, *, parent: int, mnt: str) -> None:
    (proc / str(pid) / "ns").mkdir(parents=True)
    (proc / str(pid) / "status").write_text(f"Name:\tx\nPid:\t{pid}\nPPid:\t{parent}\n", encoding="ascii")
    os.symlink(f"mnt:[{mnt}]", proc / str(pid) / "ns" / "mnt")


def test_the_node_is_the_nearest_ancestor_in_another_mount_namespace(tmp_path: Path) -> None:
    # containerd (node ns) -> shim (node ns) -> sh (container) -> python (container)
    _process(tmp_path, 10, parent=1, mnt="node")
    _process(tmp_path, 20, parent=10, mnt="node")
    _process(tmp_path, 30, parent=20, mnt="ctr")
    _process(tmp_path, 40, parent=30, mnt="ctr")
    assert node_pid(pid=40, proc=tmp_path) == 20


def test_without_the_hosts_pid_namespace_there_is_no_node_to_find(tmp_path: Path) -> None:
    # Without hostPID the container's first process has parent 0: nothing outside it is visible.
    _process(tmp_path, 1, parent=0, mnt="ctr")
    _process(tmp_path, 7, parent=1, mnt="ctr")
    with pytest.raises(FakeDriverError, match="hostPID"):
        node_pid(pid=7, proc=tmp_path)


def test_the_version_is_the_one_installer_in_the_image(tmp_path: Path) -> None:
    (tmp_path / "NVIDIA-Linux-x86_64-595.91.07.run").write_text("", encoding="ascii")
    (tmp_path / "README").write_text("", encoding="ascii")
    assert installer_version(tmp_path) == "595.91.07"
    (tmp_path / "NVIDIA-Linux-x86_64-580.95.05.run").write_text("", encoding="ascii")
    with pytest.raises(FakeDriverError, match=re.escape("holds 580.95.05, 595.91.07")):
        installer_version(tmp_path)
    with pytest.raises(FakeDriverError, match="holds none"):
        installer_version(tmp_path / "empty")


def test_the_agent_gets_the_contracts_env_with_version_and_node_root() -> None:
    contract = {"NODE_NAME": "n1", "DRIVER_CONFIG_DIGEST": "ab12", "KERNEL_MODULE_TYPE": "auto"}
    env = agent_env(contract, version="595.91.07", node_root="/proc/20/root")
    assert env == {**contract, "DRIVER_VERSION": "595.91.07", "HOST_ROOT": "/proc/20/root"}
    # A DRIVER_VERSION the pod sets wins, as NVIDIA's image lets its env override the baked one.
    assert agent_env({"DRIVER_VERSION": "1.2"}, version="595.91.07", node_root="/r")["DRIVER_VERSION"] == "1.2"
