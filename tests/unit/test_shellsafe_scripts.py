"""Every shell script the product writes onto a host, written from adversarial values and run with /bin/sh.

The runtime wrapper runs as root for every container on the nvidia runtime, the CDI hook inside every
GPU container's setup, and ``driver-ready`` is sourced by every operand's entrypoint: a value that the
shell interprets instead of carrying (``$(...)``, a stray quote) would run a command on every GPU node,
or stop every GPU container from starting. Each script is written from each value, run with /bin/sh with
harmless stubs in place of the programs it starts (they record their argv and environment, NUL-separated),
and must: not run the injected ``touch`` (no marker file), hand each value on byte for byte, exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpu_operator.agents.shared.validations import driver_ready_content
from gpu_operator.agents.toolkit import install
from gpu_operator.agents.toolkit.settings import ToolkitSettings, settings_from_env

MARKER = "pwned"  # the file every injection tries to create, in the directory it runs in

#: Each value is placed in paths and names the scripts carry; ``{marker}`` is the marker file's path.
ADVERSARIAL = {
    "command-substitution": "$(touch {marker})",
    "backticks": "`touch {marker}`",
    "double-quote": 'a"b',
    "single-quote": "a'b",
    "quote-breakout": "'; touch {marker}; '",
    "dquote-breakout": '"; touch {marker}; "',
    "newline": "one\ntouch {marker}\ntwo",
    "semicolon": "x; touch {marker}",
    "and-and": "x && touch {marker}",
    "pipe": "x | touch {marker}",
    "variable": "$HOME${PATH}$0",
    "backslashes": "a\\b\\\\c\\n\\",
    "non-ascii": "ünïcödé ✓ 日本",
    "glob": "*?[a]",
    "spaces-and-tab": " lead  mid\ttrail ",
    "leading-dash": "-n -e",
}


def _value(template: str, marker: Path) -> str:
    return template.replace("{marker}", str(marker))


def _recorder(path: Path, *, out: Path) -> Path:
    """A stand-in program: writes its $0, argv and environment, NUL-separated, under ``out``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The script's own text names only ``out``, a path the test chose to be plain.
    path.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > '{out}.argv'\nenv -0 > '{out}.env'\n")
    path.chmod(0o755)
    return path


def _recorded_argv(out: Path) -> list[str]:
    return Path(f"{out}.argv").read_bytes().decode("utf-8").split("\0")[:-1]


def _recorded_env(out: Path) -> dict[str, str]:
    entries = Path(f"{out}.env").read_bytes().decode("utf-8").split("\0")[:-1]
    return dict(entry.split("=", 1) for entry in entries)


def _install(tmp_path: Path, value: str) -> tuple[ToolkitSettings, Path]:
    """The toolkit installed with ``value`` in every setting that reaches a script; returns the runtime stub."""
    weird = tmp_path / f"dir{value}"
    runtime = _recorder(weird / "bin" / f"runc{value}", out=tmp_path / "runtime")
    env = {
        "ROOT": str(weird / "root"),
        "CDI_SPEC_DIR": str(weird / "cdi"),
        "NVIDIA_CDI_HOOK_LOG": str(weird / f"hook{value}.log"),
        # A candidate that is not there (its name reaches the wrapper too), then the stub.
        "NVIDIA_CONTAINER_RUNTIME_RUNTIMES": f"missing{value},{runtime}",
        "CDI_ENABLED": "true",
    }
    settings = settings_from_env(env)
    install.install(Path(settings.toolkit_dir), settings=settings)
    return settings, runtime


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    return subprocess.run(["/bin/sh", *argv], cwd=cwd, env={**base, **(env or {})}, capture_output=True, check=False)


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_runtime_wrapper_carries_every_value_verbatim(tmp_path: Path, case: str) -> None:
    marker = tmp_path / MARKER
    value = _value(ADVERSARIAL[case], marker)
    settings, runtime = _install(tmp_path, value)
    # The wrapper runs the OCI modifier with python3 from PATH: a recorder stands in for it.
    fake_bin = tmp_path / "fakebin"
    _recorder(fake_bin / "python3", out=tmp_path / "python")
    wrapper = Path(settings.toolkit_dir) / "nvidia-container-runtime.cdi"
    args = ["--root", f"/run/{value}", "create", "--bundle", str(tmp_path / f"bundle{value}"), value]
    result = _run([str(wrapper), *args], cwd=tmp_path, env={"PATH": f"{fake_bin}:/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not marker.exists(), "the injected command ran"
    # The runtime stub was found by its exact path and got the arguments unchanged.
    assert _recorded_argv(tmp_path / "runtime") == [str(runtime), *args]
    # The modifier was called with the toolkit directory and CDI directory exactly as configured.
    modifier = str(Path(settings.toolkit_dir) / install.MODIFIER)
    spec_dirs = f"/etc/cdi:{settings.cdi_dir}"
    python_argv = _recorded_argv(tmp_path / "python")
    assert python_argv[1:] == ["-I", "-S", modifier, "--mode", "cdi", "--spec-dirs", spec_dirs, "--", *args]


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_runtime_wrapper_names_missing_runtimes_verbatim(tmp_path: Path, case: str) -> None:
    marker = tmp_path / MARKER
    value = _value(ADVERSARIAL[case], marker)
    settings, runtime = _install(tmp_path, value)
    runtime.unlink()  # no runtime at all: the wrapper says which ones it tried
    wrapper = Path(settings.toolkit_dir) / "nvidia-container-runtime"
    result = _run([str(wrapper), "state", "ctr"], cwd=tmp_path)
    assert not marker.exists(), "the injected command ran"
    assert result.returncode == 127, result.stderr.decode("utf-8", "replace")
    tried = ", ".join(settings.low_level_runtimes)
    assert result.stderr.decode("utf-8") == f"nvidia-container-runtime: no low-level runtime found (tried {tried})\n"


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_cdi_hook_logs_to_the_configured_path(tmp_path: Path, case: str) -> None:
    marker = tmp_path / MARKER
    value = _value(ADVERSARIAL[case], marker)
    settings, _ = _install(tmp_path, value)
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}}))
    state = json.dumps({"bundle": str(tmp_path), "id": "c"}).encode()
    hook = Path(settings.toolkit_dir) / install.HOOK
    Path(settings.hook_log).parent.mkdir(parents=True, exist_ok=True)  # a value holding "/" adds directories
    result = subprocess.run(
        ["/bin/sh", str(hook), "create-symlinks", "--link", "libcuda.so.1::/etc/libcuda.so"],
        input=state,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not marker.exists(), "the injected command ran"
    assert os.readlink(rootfs / "etc/libcuda.so") == "libcuda.so.1"
    assert Path(settings.hook_log).read_text(encoding="utf-8").startswith("nvidia-cdi-hook create-symlinks --link")


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_driver_ready_sources_every_value_verbatim(tmp_path: Path, case: str) -> None:
    marker = tmp_path / MARKER
    value = _value(ADVERSARIAL[case], marker)
    ready = tmp_path / "driver-ready"
    root, ctr = f"/run/nvidia/{value}", f"/driver-root/{value}"
    ready.write_text(driver_ready_content(host_driver=False, driver_root=root, driver_root_ctr_path=ctr))
    operand = _recorder(tmp_path / "bin" / "operand", out=tmp_path / "operand")
    # What every operand's entrypoint does with the file (render/nvidia/common.py: _WAIT_AND_SOURCE).
    script = tmp_path / "entrypoint.sh"
    script.write_text(f"set -a\n. '{ready}'\nset +a\nexec '{operand}'\n")
    result = _run([str(script)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not marker.exists(), "the injected command ran"
    env = _recorded_env(tmp_path / "operand")
    assert env["NVIDIA_DRIVER_ROOT"] == root
    assert env["DRIVER_ROOT_CTR_PATH"] == ctr
    assert env["NVIDIA_DEV_ROOT"] == root
    assert env["DEV_ROOT_CTR_PATH"] == ctr
    assert env["IS_HOST_DRIVER"] == "false"


@pytest.mark.parametrize("case", sorted(set(ADVERSARIAL) - {"newline"}))
def test_cdi_hook_lists_library_folders_verbatim(tmp_path: Path, case: str) -> None:
    # A newline cannot be in a folder of ld.so.conf.d's one-per-line list: the settings refuse it
    # (test_shellsafe_refusals); every other value must arrive whole, neither split nor globbed.
    marker = tmp_path / MARKER
    value = _value(ADVERSARIAL[case], marker)
    settings, _ = _install(tmp_path, value)
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (rootfs / "etc" / "ld.so.conf.d" / "x").touch()  # something a glob of the folder could match
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}}))
    state = json.dumps({"bundle": str(tmp_path), "id": "c"}).encode()
    folders = [f"/run/nvidia/driver{value}/usr/lib64", f"/usr/lib/{value}*"]
    args = ["update-ldcache", "--folder", folders[0], f"--folder={folders[1]}"]
    hook = Path(settings.toolkit_dir) / install.HOOK
    Path(settings.hook_log).parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["/bin/sh", str(hook), *args], input=state, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, capture_output=True,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert not marker.exists(), "the injected command ran"
    conf = rootfs / "etc" / "ld.so.conf.d" / "00-nvcr-gpu-operator.conf"
    assert conf.read_text(encoding="utf-8") == "".join(f"{folder}\n" for folder in folders)
