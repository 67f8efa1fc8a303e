"""The SR-IOV device plugin's config: upstream's format, defaults, and errors naming file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.sriovdp.config import (
    ConfigError,
    Selector,
    load_config,
    parse_config,
    parse_vf_range,
)


def _parse(resources: list[Any], **kwargs: Any) -> Any:
    return parse_config(json.dumps({"resourceList": resources}), source="config.json", **kwargs)


def test_defaults_follow_upstream() -> None:
    config = _parse([{"resourceName": "sriov_a", "selectors": {"vendors": ["15b3"]}}])
    (resource,) = config.resources
    assert resource.full_name == "intel.com/sriov_a"  # upstream's --resource-prefix default
    assert resource.device_type == "netDevice"
    assert resource.exclude_topology is False
    assert resource.selectors == (Selector(vendors=("15b3",)),)
    assert config.warnings == ()


def test_full_resource_and_selector_list() -> None:
    config = _parse(
        [
            {
                "resourcePrefix": "nvidia.com",
                "resourceName": "sriov_rdma",
                "deviceType": "netDevice",
                "excludeTopology": True,
                "additionalInfo": {"*": {"k": "v"}},
                "selectors": [
                    {"vendors": ["15b3"], "devices": ["101e"], "drivers": ["mlx5_core"], "isRdma": True},
                    {"pfNames": ["ens1f0#0-3,7"], "rootDevices": ["0000:3b:00.0"], "linkTypes": ["ether"]},
                    {"pciAddresses": ["0000:3b:00.2"], "needVhostNet": True, "IsRdma": True},
                ],
            }
        ],
        default_prefix="example.org",
    )
    (resource,) = config.resources
    assert resource.full_name == "nvidia.com/sriov_rdma"
    assert resource.exclude_topology
    assert resource.additional_info == {"*": {"k": "v"}}
    first, second, third = resource.selectors
    assert first == Selector(vendors=("15b3",), devices=("101e",), drivers=("mlx5_core",), is_rdma=True)
    assert second.pf_names == ("ens1f0#0-3,7",)
    assert second.root_devices == ("0000:3b:00.0",)
    assert third.need_vhost_net
    assert third.is_rdma


def test_default_prefix_parameter() -> None:
    config = _parse([{"resourceName": "a", "selectors": {}}], default_prefix="nvidia.com")
    assert config.resources[0].full_name == "nvidia.com/a"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            [{"resourceName": "a", "selectors": {"vendors": "15b3"}}],
            "resourceList[0].selectors.vendors: must be a list",
        ),
        ([{"resourceName": "a", "selectors": [{}, {"drivers": [1]}]}], "resourceList[0].selectors[1].drivers: must be"),
        ([{"resourceName": "a", "selectors": {"isRdma": "yes"}}], "resourceList[0].selectors.isRdma: must be true"),
        ([{"resourceName": "a/b", "selectors": {}}], "resourceList[0].resourceName: must match"),
        # Upstream refuses '-' too: the name becomes part of PCIDEVICE_<PREFIX>_<NAME>, an env variable.
        ([{"resourceName": "sriov-b", "selectors": {}}], "resourceList[0].resourceName: must match"),
        ([{"selectors": {}}], "resourceList[0].resourceName: must match"),
        ([{"resourceName": "a", "resourcePrefix": "Bad_Prefix", "selectors": {}}], "resourceList[0].resourcePrefix"),
        ([{"resourceName": "a", "deviceType": "gpu", "selectors": {}}], 'deviceType: unsupported deviceType "gpu"'),
        ([{"resourceName": "a", "excludeTopology": "no", "selectors": {}}], "resourceList[0].excludeTopology"),
        ([{"resourceName": "a"}], "resourceList[0].selectors: required"),
        ([{"resourceName": "a", "selectors": []}], "resourceList[0].selectors: needs at least one selector"),
        ([{"resourceName": "a", "selectors": "x"}], "resourceList[0].selectors: must be an object"),
        ([{"resourceName": "a", "selectors": {"pfNames": ["p0#1-"]}}], "selectors.pfNames[0]: 'p0#1-'"),
        ([{"resourceName": "a", "selectors": {"rootDevices": ["x#3-1"]}}], "rootDevices[0]: 'x#3-1': range"),
        ([{"resourceName": "a", "selectors": {"pfNames": ["#1"]}}], "pfNames[0]: '#1': the name before"),
        ([{"resourceName": "a", "additionalInfo": {"*": {"k": 1}}, "selectors": {}}], "additionalInfo.*: must be"),
        (
            [{"resourceName": "a", "selectors": {}}, {"resourceName": "a", "selectors": {}}],
            "resourceList[1].resourceName",
        ),
        (["a"], "resourceList[0]: must be an object"),
    ],
)
def test_errors_name_file_and_field(resources: list[Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(resources)
    assert str(caught.value).startswith("config.json: ")
    assert message in str(caught.value)


def test_duplicate_message_names_the_first() -> None:
    with pytest.raises(ConfigError, match=r"intel.com/a already defined by resourceList\[0\]"):
        _parse([{"resourceName": "a", "selectors": {}}, {"resourceName": "a", "selectors": {"vendors": []}}])


def test_document_errors() -> None:
    with pytest.raises(ConfigError, match=r"^config\.json: not valid JSON"):
        parse_config("{", source="config.json")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_config("[]", source="config.json")
    with pytest.raises(ConfigError, match=r"^config\.json: resourceList: must be a list"):
        parse_config('{"resourceList": {}}', source="config.json")
    assert parse_config("{}", source="config.json").resources == ()


def test_unknown_keys_are_ignored_with_warnings() -> None:
    config = parse_config(
        json.dumps({"resourceList": [{"resourceName": "a", "color": 1, "selectors": {"vendor": ["15b3"]}}], "x": 1}),
        source="config.json",
    )
    assert [r.resource_name for r in config.resources] == ["a"]
    assert config.resources[0].selectors == (Selector(),)  # the misspelt selector matches nothing away
    assert config.warnings == (
        "config.json: x: unknown key, ignored (as upstream does)",
        "config.json: resourceList[0].color: unknown key, ignored (as upstream does)",
        "config.json: resourceList[0].selectors.vendor: unknown selector, ignored (as upstream does)",
    )


def test_unserved_types_and_selectors_skip_the_resource_with_a_warning() -> None:
    config = _parse(
        [
            {"resourceName": "accel", "deviceType": "accelerator", "selectors": {"vendors": ["8086"]}},
            {"resourceName": "sf", "deviceType": "auxNetDevice", "selectors": {"auxTypes": ["sf"]}},
            {"resourceName": "vdpa", "selectors": [{"vendors": ["15b3"]}, {"vdpaType": "vhost"}]},
            {"resourceName": "ok", "selectors": {"pKeys": [], "vendors": ["15b3"]}},
        ]
    )
    assert [r.resource_name for r in config.resources] == ["ok"]
    assert config.warnings == (
        "config.json: resourceList[0].deviceType: accelerator is not served by this implementation; resource skipped",
        "config.json: resourceList[1].selectors.auxTypes: not supported by this implementation; resource skipped",
        "config.json: resourceList[1].deviceType: auxNetDevice is not served by this implementation; resource skipped",
        "config.json: resourceList[2].selectors[1].vdpaType: not supported by this implementation; resource skipped",
    )


def test_vf_ranges() -> None:
    assert parse_vf_range("ens1f0") == ("ens1f0", ())
    assert parse_vf_range("ens1f0#0-3,7") == ("ens1f0", ((0, 3), (7, 7)))
    with pytest.raises(ValueError, match="not an index"):
        parse_vf_range("ens1f0#a")


def test_load_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with pytest.raises(ConfigError, match=r"^/etc/pcidp/config.json: cannot read"):
        load_config(path, source="/etc/pcidp/config.json")
    path.write_text('{"resourceList": [{"resourceName": "a", "selectors": {"vendors": 1}}]}')
    with pytest.raises(ConfigError, match=rf"^{path}: resourceList\[0\].selectors.vendors"):
        load_config(path)
