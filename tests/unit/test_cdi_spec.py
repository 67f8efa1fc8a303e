"""The CDI spec: valid against the CDI schema for every simulated node profile (MIG geometries included),
named by index, UUID and ``all``, with MIG capability device nodes; and the regression for
CVE-2025-23266: an ``LD_PRELOAD`` from the container image never reaches a hook we generate."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpu_operator.agents.shared import cdi
from gpu_operator.agents.toolkit import install, ocimodify
from gpu_operator.agents.toolkit.cdischema import duplicate_device_names, schema
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend

SCHEMA = schema()

VERSION = "550.54.15"
EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void evil(void) {
    const char *marker = getenv("EVIL_MARKER");
    FILE *f = fopen(marker ? marker : "/tmp/evil-marker", "a");
    if (f) { fputs("loaded\n", f); fclose(f); }
}
"""


def _spec_for(backend: SimulatedBackend, *, files: cdi.DriverFiles | None = None) -> dict[str, Any]:
    devices = list(backend.devices())
    mig = {d.index: list(backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
    return cdi.build_spec(
        devices=devices,
        mig=mig,
        files=files or cdi.DriverFiles(),
        driver_root="/run/nvidia/driver",
        dev_root="/run/nvidia/driver",
        hook_path="/usr/local/nvidia/toolkit/nvidia-cdi-hook",
    )


def _mig_backend(profile: str) -> SimulatedBackend:
    backend = SimulatedBackend(profile=NODE_PROFILES[profile])
    devices = list(backend.devices())
    smallest = devices[0].mig_profiles[0]
    for device in devices:
        backend.set_mig_mode(device.index, enabled=True)
        backend.reset_gpu(device.index)
        backend.create_mig_devices(device.index, profiles=[smallest.name] * smallest.max_count)
    return backend


GPU_PROFILES = sorted(name for name, p in NODE_PROFILES.items() if p.gpu_count)
MIG_PROFILES = sorted(name for name, p in NODE_PROFILES.items() if p.model is not None and p.model.mig_capable)


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_spec_validates_for_every_profile(profile: str) -> None:
    spec = _spec_for(SimulatedBackend(profile=NODE_PROFILES[profile]))
    jsonschema.validate(spec, SCHEMA)
    assert duplicate_device_names(spec) == []
    count = NODE_PROFILES[profile].gpu_count
    assert len(spec["devices"]) == 2 * count + 1  # index, UUID, all


@pytest.mark.parametrize("profile", MIG_PROFILES)
def test_spec_validates_with_mig_devices(profile: str) -> None:
    backend = _mig_backend(profile)
    spec = _spec_for(backend)
    jsonschema.validate(spec, SCHEMA)
    assert duplicate_device_names(spec) == []
    names = {d["name"]: d for d in spec["devices"]}
    first = backend.mig_devices(0)[0]
    by_index, by_uuid = names["0:0"], names[first.uuid]
    assert by_index == {**by_uuid, "name": "0:0"}
    gi, ci = cdi.mig_cap_minors(gpu_minor=0, gi_id=first.gi_id, ci_id=first.ci_id)
    assert [n["path"] for n in by_index["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{gi}",
        f"/dev/nvidia-caps/nvidia-cap{ci}",
    ]
    every = [n["path"] for n in names["all"]["containerEdits"]["deviceNodes"]]
    assert len(every) == len(set(every))


def test_mig_minors_follow_the_nvidia_caps_layout() -> None:
    # gpu0/gi0/access 3, gpu0/gi0/ci0/access 4, gpu0/gi1/access 12; each GPU spans 135 minors.
    assert cdi.mig_cap_minors(gpu_minor=0, gi_id=0, ci_id=0) == (3, 4)
    assert cdi.mig_cap_minors(gpu_minor=0, gi_id=1, ci_id=0) == (12, 13)
    assert cdi.mig_cap_minors(gpu_minor=1, gi_id=2, ci_id=1) == (3 + 135 + 18, 3 + 135 + 18 + 2)


def test_the_schema_rejects_what_the_specification_forbids() -> None:
    spec = _spec_for(SimulatedBackend(profile=NODE_PROFILES["pcie-t4"]))
    for broken in (
        {**spec, "kind": "gpu"},
        {**spec, "devices": []},
        {**spec, "devices": [{"name": "-bad", "containerEdits": {}}]},
        {**spec, "containerEdits": {"hooks": [{"hookName": "beforeStart", "path": "/x"}]}},
        {**spec, "containerEdits": {"env": ["NOEQUALS"]}},
        {**spec, "extra": True},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


def _driver_root(tmp_path: Path) -> tuple[Path, cdi.DriverFiles]:
    root = tmp_path / "driver"
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / f"libcuda.so.{VERSION}").write_text("elf")
    (libdir / f"libnvidia-ml.so.{VERSION}").write_text("elf")
    (libdir / "libcuda.so.470.1.1").write_text("an older driver's leftover")
    (libdir / f"libnvidia-cfg.so.{VERSION}").symlink_to("/etc/shadow")  # a symlink is never mounted
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    return root, cdi.discover(root=root, version=VERSION)


def test_driver_files_of_the_running_version_only(tmp_path: Path) -> None:
    _, files = _driver_root(tmp_path)
    assert files.libraries == (
        f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}",
        f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}",
    )
    assert files.binaries == ("/usr/bin/nvidia-smi",)
    assert (f"libcuda.so.{VERSION}", "/usr/lib/x86_64-linux-gnu/libcuda.so.1") in files.symlinks
    spec = _spec_for(SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]), files=files)
    jsonschema.validate(spec, SCHEMA)
    assert [h["args"][1] for h in spec["containerEdits"]["hooks"]] == ["create-symlinks", "update-ldcache"]


def test_every_hook_has_an_explicit_minimal_environment(tmp_path: Path) -> None:
    _, files = _driver_root(tmp_path)
    spec = _spec_for(SimulatedBackend(profile=NODE_PROFILES["dgx-h100"]), files=files)
    hooks = spec["containerEdits"]["hooks"]
    assert hooks
    for hook in hooks:
        assert hook["env"] == ["PATH=" + cdi.HOOK_PATH_ENV, "NVIDIA_CTK_DEBUG=false"]
    # A hook from a third-party spec without an env still gets one when our wrapper injects it.
    config: dict[str, Any] = {"process": {"env": ["LD_PRELOAD=/proc/self/cwd/poc.so"]}}
    ocimodify.apply_edits(config, edits={"hooks": [{"hookName": "createContainer", "path": "/bin/true"}]})
    assert config["hooks"]["createContainer"][0]["env"] == ocimodify.SAFE_HOOK_ENV


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the preload library")
def test_image_ld_preload_never_reaches_a_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run our generated hooks the way an OCI runtime does (path, args, env) from a parent whose environment
    carries the image's ``LD_PRELOAD``: the library is not loaded and the hook sees no LD_PRELOAD. The same
    hook started with an inherited environment does load it, which proves the test can tell."""
    evil = tmp_path / "evil.so"
    (tmp_path / "evil.c").write_text(EVIL_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(evil), str(tmp_path / "evil.c")], check=True)
    marker, log = tmp_path / "marker", tmp_path / "hook.log"
    settings = settings_from_env({"ROOT": str(tmp_path / "nvidia"), "NVIDIA_CDI_HOOK_LOG": str(log)})
    install.install(Path(settings.toolkit_dir), settings=settings)
    _, files = _driver_root(tmp_path)
    hook_path = f"{settings.toolkit_dir}/{install.HOOK}"
    spec = cdi.build_spec(devices=[], mig={}, files=files, driver_root="/", dev_root="/", hook_path=hook_path)
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": str(tmp_path)})
    (tmp_path / "config.json").write_text('{"root":{"path":"rootfs"}}')
    # The image's environment, as the parent process (runc init) would carry it.
    monkeypatch.setenv("LD_PRELOAD", str(evil))
    monkeypatch.setenv("EVIL_MARKER", str(marker))

    for hook in spec["containerEdits"]["hooks"]:
        # What runc does: exec(path, args, env) -- the parent's environment is not passed on.
        env = dict(e.split("=", 1) for e in hook["env"])
        subprocess.run([hook["path"], *hook["args"][1:]], input=state, text=True, env=env, check=True)
    assert not marker.exists(), "the image's LD_PRELOAD library was loaded into a hook"
    lines = [line for line in log.read_text().splitlines() if line.startswith("nvidia-cdi-hook ")]
    assert len(lines) == 2
    assert all("LD_PRELOAD" not in line and "NVIDIA_CTK_DEBUG PATH" in line for line in lines)
    assert (rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so.1").is_symlink()

    subprocess.run([hook_path, "update-ldcache"], input=state, text=True, check=True)  # inherits os.environ
    assert marker.exists(), "control: with an inherited environment the library does load"
