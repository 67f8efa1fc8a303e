"""The "absent means ..." semantics of ClusterPolicy flags."""

from __future__ import annotations

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.defaults import ENABLED_WHEN_UNSET, auto_upgrade_enabled, is_enabled


def test_unset_flags_follow_upstream() -> None:
    spec = ClusterPolicySpec()
    on = {s for s in ENABLED_WHEN_UNSET if is_enabled(spec, section=s)}
    assert on == {"driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd", "migManager"}


def test_explicit_flags_win() -> None:
    spec = ClusterPolicySpec.model_validate(
        {"driver": {"enabled": False}, "nodeStatusExporter": {"enabled": True}, "gds": {"enabled": True}}
    )
    assert not is_enabled(spec, section="driver")
    assert is_enabled(spec, section="nodeStatusExporter")
    assert is_enabled(spec, section="gds")


def test_unknown_section_is_an_error() -> None:
    with pytest.raises(KeyError, match="unknown ClusterPolicy section"):
        is_enabled(ClusterPolicySpec(), section="nope")


def test_auto_upgrade_needs_a_policy_and_no_sandbox() -> None:
    assert not auto_upgrade_enabled(ClusterPolicySpec())
    on = ClusterPolicySpec.model_validate({"driver": {"upgradePolicy": {"autoUpgrade": True}}})
    assert auto_upgrade_enabled(on)
    sandbox = ClusterPolicySpec.model_validate(
        {"driver": {"upgradePolicy": {"autoUpgrade": True}}, "sandboxWorkloads": {"enabled": True}}
    )
    assert not auto_upgrade_enabled(sandbox)
