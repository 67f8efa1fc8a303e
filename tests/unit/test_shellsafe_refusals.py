"""What no shell script can carry is refused with one line naming the field, before anything is written:
an invalid variable name, a NUL byte, text that is not UTF-8, a CDI directory holding the list separator."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from pathlib import Path

import pytest

from gpu_operator.agents.shared import shellquote
from gpu_operator.agents.toolkit import install, program
from gpu_operator.agents.toolkit.settings import SettingsError, settings_from_env
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext


@pytest.mark.parametrize("name", ["", "1ABC", "A-B", "A B", "A=B", "$(touch x)", "ÄBC", "A\nB", "A;B"])
def test_invalid_variable_names_are_refused(name: str) -> None:
    with pytest.raises(shellquote.ShellValueError) as caught:
        shellquote.assignments({"GOOD": "x", name: "value"}, field="spec.toolkit.env")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("spec.toolkit.env: ")
    assert "is not a valid environment variable name" in message


@pytest.mark.parametrize("name", ["A", "_", "_a1", "NVIDIA_DRIVER_ROOT", "a_B_9"])
def test_valid_variable_names_are_written(name: str) -> None:
    assert shellquote.assignment(name, "v", field="f") == f"{name}=v"


@pytest.mark.parametrize(
    ("value", "why"),
    [("a\0b", "holds a NUL byte"), ("a\udcffb", "is not valid UTF-8")],
)
def test_values_no_script_can_carry_are_refused(value: str, why: str) -> None:
    with pytest.raises(shellquote.ShellValueError, match=why) as caught:
        shellquote.quote(value, field="NVIDIA_CDI_HOOK_LOG")
    assert str(caught.value).startswith("NVIDIA_CDI_HOOK_LOG: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("ROOT", "/usr/local/\udcffnvidia", "ROOT: .* is not valid UTF-8"),
        ("NVIDIA_CONTAINER_RUNTIME_RUNTIMES", "runc\0,crun", "NVIDIA_CONTAINER_RUNTIME_RUNTIMES: .* NUL byte"),
        ("NVIDIA_CDI_HOOK_LOG", "/var/log/\udc80", "NVIDIA_CDI_HOOK_LOG: .* is not valid UTF-8"),
        ("CDI_SPEC_DIR", "/var/run/cdi:/etc/evil", "CDI_SPEC_DIR: .* must not contain ':'"),
        ("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver\n/etc", "NVIDIA_DRIVER_ROOT: .* holds a newline"),
        ("DEV_ROOT", "/\udcff", "DEV_ROOT: .* is not valid UTF-8"),
    ],
)
def test_toolkit_settings_refuse_what_the_wrapper_cannot_carry(
    tmp_path: Path, variable: str, value: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SettingsError, match=why) as caught:
        settings_from_env({variable: value})
    assert "\n" not in str(caught.value)
    # The agent itself: stays not Ready, says why, writes nothing on the host.
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env={variable: value})
    with caplog.at_level(logging.ERROR):
        asyncio.run(program.main(ctx))
    assert ctx.ready is False
    assert variable in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_a_name_outside_the_installed_set_is_refused() -> None:
    settings = settings_from_env({})
    with pytest.raises(ValueError, match="not one the toolkit installs"):
        install.wrapper_script(settings=settings, name="x\n$(touch y)", mode="cdi")


@pytest.mark.parametrize("value", ["plain", "with space", "it's", 'q"q', "$(x)", "`x`", "a\nb", "\\", "ü✓", ""])
def test_parse_assignments_reads_back_what_sh_reads(tmp_path: Path, value: str) -> None:
    text = shellquote.assignments({"A": value, "B_2": "x"}, field="f")
    assert shellquote.parse_assignments(text, field="f") == {"A": value, "B_2": "x"}
    # And sh agrees with the parser.
    script = tmp_path / "s.sh"
    script.write_text(text + 'printf %s "$A"\n', encoding="utf-8")
    shown = subprocess.run(["/bin/sh", str(script)], capture_output=True, check=True, env={"PATH": os.defpath})
    assert shown.stdout.decode("utf-8") == value


@pytest.mark.parametrize("unit", ["--force", "-H", "crio; reboot", "a b", "$(x)", "crio\n", ""])
def test_a_systemd_unit_that_is_not_a_unit_name_is_refused(unit: str) -> None:
    env = {"RUNTIME": "crio", "RUNTIME_SYSTEMD_UNIT": unit}
    if not unit:
        # Empty means the default unit, as upstream.
        assert settings_from_env(env).systemd_unit == "crio"
        return
    with pytest.raises(SettingsError, match="RUNTIME_SYSTEMD_UNIT: not a valid systemd unit name") as caught:
        settings_from_env(env)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("unit", ["crio", "containerd.service", "snap.docker.dockerd", "my-unit@x.service"])
def test_systemd_unit_names_are_accepted(unit: str) -> None:
    assert settings_from_env({"RUNTIME": "crio", "RUNTIME_SYSTEMD_UNIT": unit}).systemd_unit == unit
