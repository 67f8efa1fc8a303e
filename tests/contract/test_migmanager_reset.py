"""The MIG manager's GPU reset for real against the fake driver: ``nvidia-smi -r`` in another process.

A100s need a reset for a MIG mode change. The manager (NVML over the fake library) asks for the mode,
runs the driver's ``nvidia-smi -r -i N`` (the fake tool, which resets through the same library state
shared beside the config), sees the change applied and creates the geometry; a further process sees
the result. A reset that fails leaves the change pending: ``failed`` without ``WITH_REBOOT``, a reboot
with it (here a stand-in for ``reboot`` that resets every GPU, as a reboot would).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.contract.conftest import RunPython

LOOK = (
    "from gpu_operator.gpu.nvml import NvmlBackend\nb = NvmlBackend()\n"
    "print([d.mig_enabled for d in b.devices()], [len(b.mig_devices(d.index)) for d in b.devices()])"
)


def _tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_dir: Path, *, broken_smi: bool) -> Path:
    """A directory of driver tools first on PATH; the stand-in reboot, which resets every GPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = fake_nvml_dir / "nvidia-smi"
    if broken_smi:
        (bin_dir / "nvidia-smi").write_text(
            "#!/bin/sh\necho 'Unable to reset GPU: in use by another client' >&2\nexit 1\n"
        )
        (bin_dir / "nvidia-smi").chmod(0o755)
    else:
        (bin_dir / "nvidia-smi").symlink_to(smi)
    reboot = tmp_path / "reboot"
    reboot.write_text(f"#!/bin/sh\n{smi} -r -i 0 && {smi} -r -i 1\n")
    reboot.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return reboot


def _run(run_python: RunPython, *args: str) -> dict[str, object]:
    result = run_python("-m", "tests.contract.migreset", *args, extra=["shared_state=1"])
    assert result.returncode == 0, result.stdout + result.stderr
    out: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def test_the_mode_change_is_applied_by_nvidia_smi_reset(
    run_python: RunPython, fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reboot = _tools(tmp_path, monkeypatch, fake_nvml_dir, broken_smi=False)
    out = _run(run_python, "all-1g.5gb", "false", str(reboot))
    assert out["states"] == ["pending", "success"], out
    assert out["mig_enabled"] == [True, True]
    assert out["pending"] == [False, False]
    assert out["geometry"] == [{"1g.5gb": 7}] * 2
    assert out["device_plugin"] == "true"
    seen = run_python("-c", LOOK, extra=["shared_state=1"])
    assert seen.stdout.strip() == "[True, True] [7, 7]", seen.stderr  # the driver's state, not one process's

    out = _run(run_python, "all-disabled", "false", str(reboot))
    assert out["states"] == ["pending", "success"], out
    assert out["mig_enabled"] == [False, False]
    assert out["geometry"] == [{}, {}]


def test_a_failed_reset_fails_without_reboot_and_reboots_with_it(
    run_python: RunPython, fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reboot = _tools(tmp_path, monkeypatch, fake_nvml_dir, broken_smi=True)
    out = _run(run_python, "all-1g.5gb", "false", str(reboot))
    assert out["states"] == ["pending", "failed"], out
    assert "still needs a reboot" in str(out["reason"])
    assert "Unable to reset GPU: in use by another client" in str(out["reason"])
    assert out["pending"] == [True, True], "the change waits for a reset or a reboot"
    assert out["device_plugin"] == "true", "the GPU clients are back"

    out = _run(run_python, "all-1g.5gb", "true", str(reboot))
    assert out["states"] == ["pending", "rebooting", "success"], out
    assert out["mig_enabled"] == [True, True]
    assert out["geometry"] == [{"1g.5gb": 7}] * 2
