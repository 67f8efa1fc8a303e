"""``1c.*`` compute-instance profiles end to end on the simulated backend: the config, the geometry the
MIG manager leaves on the GPUs (one MIG device per compute instance) and the resources the device
plugin makes of it (``nvidia.com/mig-1c.3g.20gb``, as upstream names them)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from gpu_operator.agents.migmanager.config import MigConfigError, load
from gpu_operator.agents.migmanager.reconfigure import REASON_ANNOTATION, STATE_LABEL
from gpu_operator.agents.shared.resources import base_resources
from tests.unit.test_migmanager_reconfigure import DP, Harness

CONFIG = """
version: v1
mig-configs:
  compute:
  - devices: [0]
    mig-enabled: true
    mig-devices: {"1c.3g.20gb": 3, "3c.3g.20gb": 1}
  - devices: [1]
    mig-enabled: true
    mig-devices: {"1c.7g.40gb": 2, "2c.7g.40gb": 1}
  too-many:
  - devices: all
    mig-enabled: true
    mig-devices: {"1c.3g.20gb": 7}
"""


def _run(h: Harness, name: str) -> str:
    return asyncio.run(h.work.run(name=name, configs=load(CONFIG, source="config.yaml"))).state


def test_compute_instances_are_mig_devices_and_plugin_resources() -> None:
    h = Harness()
    assert _run(h, "compute") == "success"
    assert h.geometry() == [Counter({"1c.3g.20gb": 3, "3g.20gb": 1}), Counter({"1c.7g.40gb": 2, "2c.7g.40gb": 1})]
    first = list(h.backend.mig_devices(0))
    assert len({m.gi_id for m in first}) == 2, "three 1-slice compute instances share one GPU instance"
    assert sorted(m.ci_id for m in first if m.profile == "1c.3g.20gb") == [0, 1, 2]
    assert len({m.uuid for m in first}) == 4
    second = list(h.backend.mig_devices(1))
    assert {m.gi_id for m in second} == {1}, "2c + 1c + 1c fit in one 7g.40gb"
    assert h.node.values_of(DP) == ["paused-for-mig-change", "true"]

    devices = list(h.backend.devices())
    resources = base_resources(devices=devices, mig={0: first, 1: second}, strategy="mixed")
    counts = {name: len(found) for name, found in resources.items()}
    assert counts == {
        "nvidia.com/mig-1c.3g.20gb": 3,
        "nvidia.com/mig-3g.20gb": 1,
        "nvidia.com/mig-1c.7g.40gb": 2,
        "nvidia.com/mig-2c.7g.40gb": 1,
    }

    assert _run(h, "compute") == "success"
    assert h.node.values_of(STATE_LABEL)[-1] == "success"
    assert list(h.backend.mig_devices(0)) == first, "already applied: the compute instances are left alone"


def test_compute_instances_that_do_not_fit_fail_before_pausing() -> None:
    h = Harness()
    assert _run(h, "too-many") == "failed"
    assert "3 x 3g.20gb requested, at most 2 fit" in h.cluster.annotations[REASON_ANNOTATION]
    assert h.node.values_of(DP) == []


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ("4c.3g.20gb", "4c.3g.20gb: a compute instance cannot be larger than its GPU instance"),
        ("1c.3g", "'1c.3g' is not a MIG profile"),
    ],
)
def test_bad_compute_instance_profiles_in_the_config(profile: str, message: str) -> None:
    text = f"version: v1\nmig-configs:\n  x: [{{devices: all, mig-enabled: true, mig-devices: {{{profile}: 1}}}}]\n"
    with pytest.raises(MigConfigError, match=message):
        load(text, source="config.yaml")


def test_a_full_compute_instance_is_the_plain_profile() -> None:
    configs = load("version: v1\nmig-configs: {x: [{devices: all, mig-enabled: true, mig-devices: "
                   "{3c.3g.20gb: 1, 3g.20gb: 1}}]}", source="config.yaml")  # fmt: skip
    assert configs["x"][0].mig_devices == (("3g.20gb", 2),)
