"""Device plugin config file v1: good files, bad files with field-named errors, and precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings, load_config, parse_config

TIME_SLICING = """
version: v1
flags:
  migStrategy: none
  plugin:
    deviceListStrategy: [cdi-annotations, cdi-cri]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def test_time_slicing_config() -> None:
    settings = Settings.resolve(config=parse_config(text=TIME_SLICING, source="ts"), env={})
    assert settings.sharing_mode == "time-slicing"
    assert settings.device_list_strategy == ("cdi-annotations", "cdi-cri")
    assert settings.fail_requests_greater_than_one is True
    assert settings.sharing is not None
    assert settings.sharing.resources[0].replicas == 4


def test_empty_and_json_configs(tmp_path: Path) -> None:
    assert Settings.resolve(config=parse_config(text="", source="e"), env={}) == Settings()
    path = tmp_path / "c.json"
    path.write_text('{"version": "v1", "flags": {"migStrategy": "mixed"}}', encoding="utf-8")
    assert Settings.resolve(config=load_config(path), env={}).mig_strategy == "mixed"


def test_mps_defaults_to_failing_multi_requests() -> None:
    text = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\nflags: {mpsRoot: /run/nvidia/mps}"
    settings = Settings.resolve(config=parse_config(text=text, source="m"), env={})
    assert settings.sharing_mode == "mps"
    assert settings.fail_requests_greater_than_one is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2", "version: Input should be 'v1' or ''"),
        ("flags: {migStrategy: dual}", "flags.migStrategy"),
        ("flags: {plugn: {}}", "flags.plugn: Extra inputs are not permitted"),
        ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}", "replicas"),
        ("sharing: {timeSlicing: {resources: [{name: example.com/gpu, replicas: 2}]}}", "must be nvidia.com/gpu"),
        (
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]},"
            " mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}",
            "mutually exclusive",
        ),
        (
            "flags: {migStrategy: mixed}\nsharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}",
            "migStrategy=mixed",
        ),
        ("flags: {failOnInitError: 'yes'}", "flags.failOnInitError"),
        ("[1, 2]", "must be a mapping"),
        ("a: [", "invalid YAML"),
    ],
)
def test_bad_configs_are_refused_with_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"bad\.yaml") as info:
        parse_config(text=text, source="bad.yaml")
    assert message in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_precedence_cli_over_env_over_file() -> None:
    config = parse_config(text="flags: {migStrategy: single, plugin: {deviceIDStrategy: index}}", source="p")
    assert Settings.resolve(config=config, env={}).mig_strategy == "single"
    assert Settings.resolve(config=config, env={"MIG_STRATEGY": "mixed"}).mig_strategy == "mixed"
    settings = Settings.resolve(config=config, env={"MIG_STRATEGY": "mixed"}, overrides={"mig_strategy": "none"})
    assert settings.mig_strategy == "none"
    assert settings.device_id_strategy == "index"
    env = {"DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri", "PASS_DEVICE_SPECS": "true"}
    settings = Settings.resolve(config=None, env=env)
    assert settings.device_list_strategy == ("cdi-annotations", "cdi-cri")
    assert settings.pass_device_specs is True


def test_settings_cross_checks() -> None:
    with pytest.raises(ConfigError, match="deviceListStrategy"):
        Settings.resolve(config=None, env={"DEVICE_LIST_STRATEGY": "magic"})
    text = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
    with pytest.raises(ConfigError, match="mpsRoot"):
        Settings.resolve(config=parse_config(text=text, source="m"), env={})
    with pytest.raises(ConfigError, match="migStrategy=mixed"):
        Settings.resolve(config=parse_config(text=text, source="m"), env={"MPS_ROOT": "/m", "MIG_STRATEGY": "mixed"})
