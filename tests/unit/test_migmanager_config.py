"""mig-parted config v1: parsing errors that say where, planning per GPU (filters, indices, later entries
win), and the default set: every ``all-*`` config meant for a simulated MIG model fits that model."""

from __future__ import annotations

import pytest

from gpu_operator.agents.migmanager.config import MigConfigError, Target, load, plan
from gpu_operator.agents.migmanager.defaults import config_name, default_configs, default_yaml
from gpu_operator.gpu.catalog import GPU_MODELS, NODE_PROFILES
from gpu_operator.gpu.mig import validate_geometry
from gpu_operator.gpu.simulated import SimulatedBackend

SPLIT = """
version: v1
mig-configs:
  split-node:
  - devices: [0]
    mig-enabled: false
  - device-filter: "0x20B010DE"
    devices: [1]
    mig-enabled: true
    mig-devices: {"3g.20gb": 2}
  custom:
  - devices: all
    mig-enabled: true
    mig-devices: {"1g.5gb": 2, "2g.10gb": 1}
  - device-filter: ["0x233010DE"]
    devices: all
    mig-enabled: false
"""


def test_plan_selects_by_index_and_filter() -> None:
    configs = load(SPLIT, source="cm/config.yaml")
    devices = SimulatedBackend(profile=NODE_PROFILES["a100-mig"]).devices()
    assert plan(configs, name="split-node", devices=devices) == {
        0: Target(mig_enabled=False),
        1: Target(mig_enabled=True, profiles=("3g.20gb", "3g.20gb")),
    }
    # The H100 filter matches nothing on an A100 node; the first entry stands.
    expected = Target(mig_enabled=True, profiles=("1g.5gb", "1g.5gb", "2g.10gb"))
    assert plan(configs, name="custom", devices=devices) == {0: expected, 1: expected}


def test_a_later_entry_wins_for_the_same_gpu() -> None:
    configs = load(SPLIT, source="x")
    h100 = SimulatedBackend(profile=NODE_PROFILES["dgx-h100"]).devices()
    assert set(plan(configs, name="custom", devices=h100).values()) == {Target(mig_enabled=False)}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "version must be v1"),
        ("version: v1\nmig-configs: {}", "at least one config"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}", "mig-devices is required"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}",
            "must be empty",
        ),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, colour: red}]}", "unknown key(s) colour"),
        ("version: v1\nmig-configs: {a: [{devices: [x], mig-enabled: false}]}", "devices must be 'all'"),
        ("version: v1\nmig-configs: {a: [{devices: all, device-filter: A100, mig-enabled: false}]}", "PCI ID"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {big: 1}}]}",
            "not a MIG profile",
        ),
        ("version: v1\nmig-configs: [", "invalid YAML"),
    ],
)
def test_errors_name_the_file_and_entry(text: str, fragment: str) -> None:
    with pytest.raises(MigConfigError) as caught:
        load(text, source="cm/config.yaml")
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("cm/config.yaml")


def test_unknown_name_is_an_error() -> None:
    with pytest.raises(MigConfigError, match=r"no MIG config named 'all-9g\.1tb'"):
        plan(default_configs(), name="all-9g.1tb", devices=[])


def test_compute_instance_profile_syntax_parses() -> None:
    text = "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true,"
    text += " mig-devices: {1c.3g.20gb: 2, 1g.10gb+me: 1}}]}"
    assert load(text, source="x")["a"][0].mig_devices == (("1c.3g.20gb", 2), ("1g.10gb+me", 1))


MIG_MODELS = sorted(key for key, model in GPU_MODELS.items() if model.mig_capable)


@pytest.mark.parametrize("model_key", MIG_MODELS)
def test_default_configs_fit_each_simulated_model(model_key: str) -> None:
    """all-disabled, all-enabled, all-balanced and every all-<profile> the model offers plan to a layout the
    backend accepts (the device filters match the catalog's PCI IDs)."""
    model = GPU_MODELS[model_key]
    configs = default_configs()
    profile = next(p for p in NODE_PROFILES.values() if p.gpu_model == model_key)
    devices = SimulatedBackend(profile=profile).devices()
    names = ["all-disabled", "all-enabled", "all-balanced"] + [config_name(p.name) for p in model.mig_profiles]
    for name in names:
        targets = plan(configs, name=name, devices=devices)
        assert set(targets) == {d.index for d in devices}, f"{name} does not select every {model.name}"
        for target in targets.values():
            validate_geometry(available=model.mig_profiles, requested=target.profiles, gpu=f"{model_key} {name}")
    assert plan(configs, name=f"all-{model.mig_profiles[0].name}", devices=devices)[0].profiles == tuple(
        [model.mig_profiles[0].name] * model.mig_profiles[0].max_count
    )


def test_default_yaml_round_trips() -> None:
    assert load(default_yaml(), source="default") == default_configs()
    assert len(default_configs()) >= 40
