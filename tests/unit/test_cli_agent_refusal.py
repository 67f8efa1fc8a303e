"""``gpu-operator agent NAME`` ends a refused config in one line and exit 1, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpu_operator.agents.rdmadp.config import RdmaConfigError
from gpu_operator.agents.runtime import AgentContext
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
