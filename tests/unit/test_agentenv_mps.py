"""The MPS control daemon's environment (MPS_CHECK_INTERVAL)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.mps import program
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext


def test_good_intervals_read_as_before() -> None:
    assert [program.check_interval({"MPS_CHECK_INTERVAL": t}) for t in ("", "5", "0.5", "2s", "1m")] == [
        5.0, 5.0, 0.5, 2.0, 60.0
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["inf", "nan", "1e999", "9" * 5000, "\u0665", "0", "-1", "2h"])
def test_bad_intervals_are_refused_naming_the_variable(text: str) -> None:
    # float() took all of these: inf slept for ever, nan and 0 spun, Arabic-Indic 5 was 5.
    with pytest.raises(ConfigRefusedError) as caught:
        program.check_interval({"MPS_CHECK_INTERVAL": text})
    message = str(caught.value)
    assert message.startswith("MPS_CHECK_INTERVAL: ")
    assert "from 100ms to 1h" in message
    assert "\n" not in message


def test_the_agent_starts_no_daemon_with_a_bad_interval(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]),
                      env={"MPS_CHECK_INTERVAL": "nan"})  # fmt: skip
    with pytest.raises(ConfigRefusedError, match="MPS_CHECK_INTERVAL"):
        asyncio.run(program.main(ctx))
    assert not any(tmp_path.rglob("*"))
    assert not ctx.ready
