"""The OFED driver container's and its safe-load init container's environment."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.ofed import program, safeload
from gpu_operator.agents.ofed.safeload import ANNOTATION
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.null import NullBackend
from tests.unit.fake_context import FakeContext


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("NVIDIA_NIC_DRIVER_VER", "25.04\nGPU_DIRECT_RDMA_ENABLED=true", "is not a driver version"),
        ("NVIDIA_NIC_DRIVER_VER", "../../x", "is not a driver version"),
        ("UNLOAD_STORAGE_MODULES", "please", "is not true or false"),
        ("RESTORE_DRIVER_ON_POD_TERMINATION", "nein", "is not true or false"),  # used to mean "do not restore"
        ("OFED_BACKEND", "magic\n" + "x" * 5000, "is not one of host, simulated, null"),
    ],
)
def test_bad_driver_values_are_refused_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(program.OfedError) as caught:
        program.settings_from_env({variable: value})
    assert isinstance(caught.value, ConfigRefusedError)
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert says in message
    assert "\n" not in message
    assert len(message) < 200


def test_good_driver_values_as_before() -> None:
    assert program.settings_from_env({}) == program.OfedSettings()
    s = program.settings_from_env({"NVIDIA_NIC_DRIVER_VER": "25.04-0.6.1.0-2", "UNLOAD_STORAGE_MODULES": "True",
                                   "RESTORE_DRIVER_ON_POD_TERMINATION": "false", "OFED_BACKEND": "Null"})  # fmt: skip
    assert s == program.OfedSettings(backend="null", version="25.04-0.6.1.0-2", unload_storage=True,
                                     restore_on_termination=False)  # fmt: skip


def test_the_driver_container_touches_nothing_with_a_bad_value(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(reason="no GPU"),
                      env={"OFED_BACKEND": "simulated", "NVIDIA_NIC_DRIVER_VER": "1\n2"})  # fmt: skip
    with pytest.raises(ConfigRefusedError, match=r"^NVIDIA_NIC_DRIVER_VER: "):
        asyncio.run(program.main(ctx))
    assert not any(tmp_path.rglob("*"))


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SAFE_LOAD_POLL_SECONDS", "inf", "is not a duration (or number of seconds) from 100ms to 5m"),
        ("SAFE_LOAD_POLL_SECONDS", "9" * 5000, "is not a duration"),
        ("SAFE_LOAD_POLL_SECONDS", "\u0661", "is not a duration"),
        ("SAFE_LOAD_ANNOTATION", "nvidia.com/wait\nx", "is not an annotation key"),
        ("SAFE_LOAD_ANNOTATION", "a/b/c", "is not an annotation key"),
    ],
)
def test_bad_safe_load_values_are_refused(variable: str, value: str, says: str) -> None:
    with pytest.raises(safeload.SafeLoadError) as caught:
        safeload.settings_from_env({variable: value})
    assert isinstance(caught.value, ConfigRefusedError)
    assert str(caught.value).startswith(f"{variable}: ")
    assert says in str(caught.value)


def test_good_safe_load_values_as_before() -> None:
    assert safeload.settings_from_env({}) == (ANNOTATION, 1.0)
    env = {"SAFE_LOAD_ANNOTATION": "example.com/safe-load", "SAFE_LOAD_POLL_SECONDS": "0.5"}
    assert safeload.settings_from_env(env) == ("example.com/safe-load", 0.5)
