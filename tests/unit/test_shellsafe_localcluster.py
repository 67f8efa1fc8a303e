"""The scripts the local cluster and the fake driver image write, from adversarial paths and names, run
with /bin/sh and stub programs (mount, touch, ...) that record their argv: nothing injected runs, every
path reaches the program byte for byte, the script exits 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpu_operator.localcluster.nodes import cgroups
from gpu_operator.localcluster.nodes import node as nodemod
from gpu_operator.localcluster.nodes import spec as nodespec
from gpu_operator.sim.fakedriver import image
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from tests.unit.test_shellsafe_scripts import ADVERSARIAL, MARKER

STUBS = ("mount", "mkdir", "mountpoint", "touch", "sleep", "gpu-operator")


def _stubs(tmp_path: Path) -> tuple[Path, Path]:
    """A directory of stand-ins that append their argument count, name and argv (NUL-separated) to a log."""
    bin_dir, log = tmp_path / "stubs", tmp_path / "calls"
    bin_dir.mkdir()
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$#\" {name} \"$@\" >> '{log}'\n")
        stub.chmod(0o755)
    return bin_dir, log


def _calls(log: Path) -> list[list[str]]:
    fields = log.read_bytes().decode("utf-8").split("\0")[:-1]
    calls = []
    while fields:
        count = int(fields[0])
        calls.append(fields[1 : count + 2])
        fields = fields[count + 2 :]
    return calls


def _value(case: str, tmp_path: Path) -> str:
    return ADVERSARIAL[case].replace("{marker}", str(tmp_path / MARKER))


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_namespace_script_carries_the_node_root_verbatim(tmp_path: Path, case: str) -> None:
    root = tmp_path / f"node{_value(case, tmp_path)}"
    spec = nodespec.NodeSpec(name="n", index=1, root=root, kubelet_port=1, healthz_port=2, run_cgroup="/g",
                             fake_pci=True, host_overlay=True, fake_kernel=True)  # fmt: skip
    bin_dir, log = _stubs(tmp_path)
    script = nodespec.namespace_script(spec=spec)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, env=env, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not (tmp_path / MARKER).exists(), "the injected command ran"
    calls = _calls(log)
    for host_path in nodespec.PRIVATE_PATHS:
        assert ["mount", "--bind", str(spec.private(host_path)), host_path] in calls
    assert ["mount", "--bind", str(spec.fake_pci_devices), nodespec.SYS_PCI_DEVICES] in calls
    kept = spec.root / "host-overlay" / "dev-submounts"
    assert ["mount", "--rbind", "/dev", str(kept)] in calls
    for host_path in nodespec.OVERLAY_PATHS:
        upper = spec.host_overlay_root / host_path.lstrip("/")
        options = f"lowerdir={host_path},upperdir={upper},workdir={spec.overlay_work(host_path)}"
        assert ["mount", "-t", "overlay", "overlay", "-o", options, host_path] in calls
    work = root / "fake-kernel" / "work"
    options = f"lowerdir={nodespec.SYS_MODULE},upperdir={spec.fake_kernel_root},workdir={work}"
    assert ["mount", "-t", "overlay", "overlay", "-o", options, nodespec.SYS_MODULE] in calls
    assert ["touch", str(spec.ready_file)] in calls
    assert calls[-1] == ["sleep", "infinity"]


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_in_cgroup_joins_the_named_cgroup_verbatim(tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    hierarchies = [tmp_path / "v1-cpu", tmp_path / "v1-memory"]
    monkeypatch.setattr(cgroups, "hierarchies", lambda: hierarchies)
    cgroup = f"/gpuop/n{_value(case, tmp_path)}"
    for hierarchy in hierarchies:
        (hierarchy / cgroup.strip("/")).mkdir(parents=True)
    bin_dir, log = _stubs(tmp_path)
    argv = nodemod.in_cgroup(cgroup=cgroup, argv=[str(bin_dir / "sleep"), "x y", "$(z)"])
    result = subprocess.run(argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not (tmp_path / MARKER).exists(), "the injected command ran"
    for hierarchy in hierarchies:
        assert (hierarchy / cgroup.strip("/") / "cgroup.procs").read_text().strip().isdigit()
    assert _calls(log) == [["sleep", "x y", "$(z)"]]


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_fake_driver_runfile_carries_its_version_verbatim(tmp_path: Path, case: str) -> None:
    version = f"550.{_value(case, tmp_path)}"
    build = FakeDriverBuild(directory=tmp_path / "build")
    build.directory.mkdir()
    for artifact in (build.library, build.cuda, build.smi, build.mps_control):
        artifact.write_bytes(b"\x7fELF stand-in")
    tree = tmp_path / "tree"
    image.layer_tree(tree, build=build, versions=[version], broken=[version])
    runfile = tree / image.RUNFILE_DIR / f"NVIDIA-Linux-x86_64-{version}.run"
    bin_dir, log = _stubs(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.fspath(tmp_path)}
    result = subprocess.run(
        ["/bin/sh", str(runfile), "--silent"], cwd=tmp_path, env=env, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not (tmp_path / MARKER).exists(), "the injected command ran"
    expected = ["gpu-operator", "sim", "fake-driver", "install", "--version", version, "--without-cuda", "--silent"]
    assert _calls(log) == [expected]
