"""The installed executables: the runtime wrapper adds the requested CDI devices to the bundle and execs the
low-level runtime with the same arguments; an unresolvable device stops the container; the hook never
creates a link through a directory that resolves outside the container root."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.shared import cdi
from gpu_operator.agents.toolkit import install, ocimodify
from gpu_operator.agents.toolkit.settings import ToolkitSettings, settings_from_env


def _setup(tmp_path: Path) -> tuple[ToolkitSettings, Path, Path]:
    fake_runc = tmp_path / "bin" / "runc"
    fake_runc.parent.mkdir()
    # Records its arguments, so the test sees exactly what the wrapper exec'd.
    fake_runc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/runc-args\n')
    fake_runc.chmod(0o755)
    env = {
        "ROOT": str(tmp_path / "nvidia"),
        "CDI_SPEC_DIR": str(tmp_path / "cdi"),
        "NVIDIA_CONTAINER_RUNTIME_RUNTIMES": str(fake_runc),
        "CDI_ENABLED": "true",
    }
    settings = settings_from_env(env)
    install.install(Path(settings.toolkit_dir), settings=settings)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    return settings, bundle, fake_runc


def _spec() -> dict[str, Any]:
    # No device nodes: unit tests may run without the right to mknod (the containerd test has real ones).
    return {
        "cdiVersion": cdi.CDI_VERSION,
        "kind": cdi.KIND,
        "devices": [{"name": "0", "containerEdits": {"env": ["GPU0=yes"]}}],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "mounts": [{"hostPath": "/usr/bin/env", "containerPath": "/usr/bin/nvidia-smi", "options": ["ro"]}],
            "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"], "env": ["PATH=/bin"]}],
        },
    }


def _run_wrapper(settings: ToolkitSettings, bundle: Path, config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (bundle / "config.json").write_text(json.dumps(config))
    wrapper = Path(settings.toolkit_dir) / "nvidia-container-runtime"
    args = ["--root", "/run/runc", "--log", "/tmp/x.log", "create", "--bundle", str(bundle), "ctr-1"]
    return subprocess.run([str(wrapper), *args], capture_output=True, text=True, check=False)


def test_wrapper_injects_requested_devices_and_execs_runc(tmp_path: Path) -> None:
    settings, bundle, _ = _setup(tmp_path)
    Path(settings.cdi_dir).mkdir()
    (Path(settings.cdi_dir) / cdi.spec_file_name()).write_text(json.dumps(_spec()))
    result = _run_wrapper(settings, bundle, {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "HOME=/"]}})
    assert result.returncode == 0, result.stderr
    config = json.loads((bundle / "config.json").read_text())
    assert config["process"]["env"] == ["HOME=/", "NVIDIA_VISIBLE_DEVICES=void", "GPU0=yes"]
    assert config["mounts"][0]["destination"] == "/usr/bin/nvidia-smi"
    assert config["hooks"]["createContainer"] == [{"path": "/bin/true", "args": ["true"], "env": ["PATH=/bin"]}]
    recorded = (tmp_path / "runc-args").read_text().splitlines()
    assert recorded == ["--root", "/run/runc", "--log", "/tmp/x.log", "create", "--bundle", str(bundle), "ctr-1"]


def test_wrapper_leaves_containers_without_gpus_alone(tmp_path: Path) -> None:
    settings, bundle, _ = _setup(tmp_path)
    config = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
    assert _run_wrapper(settings, bundle, config).returncode == 0
    assert json.loads((bundle / "config.json").read_text()) == config


def test_unresolvable_device_stops_the_container(tmp_path: Path) -> None:
    settings, bundle, _ = _setup(tmp_path)
    result = _run_wrapper(settings, bundle, {"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=7"}})
    assert result.returncode == 1
    assert "unresolvable CDI devices nvidia.com/gpu=7" in result.stderr
    assert not (tmp_path / "runc-args").exists(), "runc must not run for a container missing its GPUs"


def test_a_device_path_that_is_not_a_device_node_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia0"
    fake.write_text("not a device")
    with pytest.raises(ocimodify.CdiError, match="not a device node"):
        ocimodify.apply_edits({}, edits={"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(fake)}]})


def test_requested_devices_from_env_and_annotations() -> None:
    config = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0,GPU-abc,nvidia.com/gpu=all"]},
        "annotations": {"cdi.k8s.io/dp": "nvidia.com/gpu=1", "other": "nvidia.com/gpu=9"},
    }
    assert ocimodify.requested_devices(config, mode="cdi") == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=GPU-abc",
        "nvidia.com/gpu=all",
    ]
    assert ocimodify.parse_runc_args(["--root", "create", "run", "-b", "/b", "id"]) == ("run", "/b")


def test_hook_refuses_links_that_escape_the_container_root(tmp_path: Path) -> None:
    settings = settings_from_env({"ROOT": str(tmp_path / "nvidia"), "NVIDIA_CDI_HOOK_LOG": str(tmp_path / "log")})
    install.install(Path(settings.toolkit_dir), settings=settings)
    rootfs, outside = tmp_path / "rootfs", tmp_path / "outside"
    (rootfs / "usr").mkdir(parents=True)
    outside.mkdir()
    (rootfs / "usr/lib").symlink_to(outside)  # a crafted image: /usr/lib points out of the root
    (rootfs / "lib").mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}}))
    state = json.dumps({"bundle": str(tmp_path), "id": "c"})
    hook = Path(settings.toolkit_dir) / install.HOOK
    links = ["--link", "libcuda.so.1::/usr/lib/libcuda.so", "--link", "libcuda.so.1::/lib/libcuda.so"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    subprocess.run([str(hook), "create-symlinks", *links], input=state, text=True, env=env, check=True)
    assert list(outside.iterdir()) == []
    assert os.readlink(rootfs / "lib/libcuda.so") == "libcuda.so.1"
    assert "resolves outside the container root" in (tmp_path / "log").read_text()
