"""``gpu-operator agent NAME`` ends a refused config in one line and exit 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpu_operator.agents.rdmadp.config import RdmaConfigError
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.validator.checks import ValidationError
from gpu_operator.cli import agent


def test_a_refused_config_is_one_line_naming_the_agent_and_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuses(_ctx: AgentContext) -> None:
        raise RdmaConfigError("/k8s-rdma-shared-dev-plugin/config.json: configList[0].rdmaHcaMax: at most 10000")

    monkeypatch.setattr(agent, "PROGRAMS", {"rdma-shared-dp": refuses})
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(agent.agent_command, ["rdma-shared-dp", "--gpu-backend", "null"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "Error: agent rdma-shared-dp: /k8s-rdma-shared-dev-plugin/config.json: configList[0].rdmaHcaMax: at most 10000"
    ]


def test_any_other_failure_still_surfaces_as_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    async def breaks(_ctx: AgentContext) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(agent, "PROGRAMS", {"rdma-shared-dp": breaks})
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(agent.agent_command, ["rdma-shared-dp", "--gpu-backend", "null"])
    assert isinstance(result.exception, KeyError)


def test_a_check_that_gave_up_is_one_line_also_in_the_termination_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The kubelet turns /dev/termination-log into the container's termination message: the upgrade
    controller's failure reason for a node whose validator gave up."""

    async def gives_up(_ctx: AgentContext) -> None:
        raise ValidationError("cuda validation failed 3 times in a row, 5 s apart: CUDA workload failed: no libcuda")

    log = tmp_path / "termination-log"
    log.write_text("", encoding="utf-8")
    monkeypatch.setattr(agent, "PROGRAMS", {"validator": gives_up})
    monkeypatch.setattr(agent, "TERMINATION_LOG", log)
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(agent.agent_command, ["validator", "--gpu-backend", "null"])
    line = "agent validator: cuda validation failed 3 times in a row, 5 s apart: CUDA workload failed: no libcuda"
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"Error: {line}"]
    assert log.read_text(encoding="utf-8") == line
    # Outside a container there is no termination log, and none is created.
    agent.write_termination_message("x", path=tmp_path / "absent")
    assert not (tmp_path / "absent").exists()
