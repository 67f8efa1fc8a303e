"""`gpu-operator demo --no-interactive` runs every step to completion on its own cluster."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpu_operator.cli.main import cli

pytestmark = pytest.mark.integration


def test_demo_runs_to_completion() -> None:
    result = CliRunner().invoke(cli, ["demo", "--no-interactive"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "established clusterpolicies.nvidia.com" in out
    assert "established nvidiadrivers.nvidia.com" in out
    # The server's defaults are shown, e.g. the toolkit install dir the policy never set.
    assert "/usr/local/nvidia" in out
    assert "h100-precompiled" in out
    # The bad policy is refused offline and by the server, naming the same fields.
    for field in ("spec.driver.upgradePolicy.maxUnavailable", "spec.mig.strategy"):
        assert out.count(field) >= 2, field
    assert "HTTP 422" in out
    assert "demo finished" in out
