"""The RDMA shared device plugin's config: upstream's format and checks, errors naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.rdmadp.config import (
    DEFAULT_INTERVAL_SECONDS,
    RdmaConfigError,
    Selectors,
    load_config,
    parse_config,
)


def _parse(data: Any) -> Any:
    return parse_config(json.dumps(data), source="config.json")


def _resource(**fields: Any) -> dict[str, Any]:
    return {"resourceName": "rdma_shared_device_a", "rdmaHcaMax": 63, "selectors": {"vendors": ["15b3"]}, **fields}


def test_upstream_sample_with_defaults() -> None:
    config = _parse(
        {
            "configList": [
                _resource(selectors={"vendors": ["15b3"], "deviceIDs": ["1021"], "linkTypes": ["infiniband"]}),
                {"resourceName": "hca_b", "resourcePrefix": "example.com", "rdmaHcaMax": 2, "devices": ["ib0"]},
            ]
        }
    )
    assert config.periodic_update_seconds == DEFAULT_INTERVAL_SECONDS
    first, second = config.resources
    assert first.resource_name == "rdma/rdma_shared_device_a"  # resourcePrefix defaults to rdma
    assert first.rdma_hca_max == 63
    assert first.selectors == Selectors(vendors=("15b3",), device_ids=("1021",), link_types=("infiniband",))
    assert second.resource_name == "example.com/hca_b"
    assert second.selectors == Selectors(if_names=("ib0",))  # deprecated devices become ifNames
    assert any("configList[1].devices: deprecated" in w for w in config.warnings)


def test_interval_zero_turns_rediscovery_off_and_unknown_keys_warn() -> None:
    config = _parse({"periodicUpdateInterval": 0, "extra": 1, "configList": [_resource(other=True)]})
    assert config.periodic_update_seconds == 0
    assert any(w.startswith("config.json: extra: unknown field") for w in config.warnings)
    assert any(w.startswith("config.json: configList[0].other: unknown field") for w in config.warnings)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"configList": []}, "config.json: configList: expected a non-empty list"),
        ({}, "config.json: configList: expected a non-empty list"),
        ([], "config.json: expected a JSON object"),
        ({"periodicUpdateInterval": -1, "configList": [_resource()]}, "config.json: periodicUpdateInterval: must not"),
        ({"periodicUpdateInterval": "60", "configList": [_resource()]}, "periodicUpdateInterval: expected an integer"),
        ({"configList": [_resource(), _resource(resourceName="bad-name")]}, 'configList[1].resourceName: "bad-name"'),
        ({"configList": [_resource(resourceName=None)]}, "configList[0].resourceName: null must match"),
        ({"configList": [_resource(), _resource()]}, "configList[1].resourceName: 'rdma_shared_device_a' is already"),
        ({"configList": [_resource(rdmaHcaMax=-2)]}, "configList[0].rdmaHcaMax: must not be negative"),
        ({"configList": [_resource(rdmaHcaMax=True)]}, "configList[0].rdmaHcaMax: expected an integer"),
        ({"configList": [_resource(resourcePrefix=3)]}, "configList[0].resourcePrefix: expected a string"),
        ({"configList": [_resource(selectors={})]}, 'configList[0]: neither "selectors" nor'),
        ({"configList": [_resource(devices=["ib0"])]}, 'configList[0]: both "selectors" and "devices"'),
        (
            {"configList": [_resource(selectors={"vendors": "15b3"})]},
            "configList[0].selectors.vendors: expected a list",
        ),
        ({"configList": [_resource(selectors={"ifNames": ["a", 1]})]}, "configList[0].selectors.ifNames[1]: expected"),
        ({"configList": [_resource(selectors=["x"])]}, "configList[0].selectors: expected an object"),
        ({"configList": ["x"]}, "configList[0]: expected an object"),
    ],
)
def test_errors_name_the_file_and_field(data: Any, message: str) -> None:
    with pytest.raises(RdmaConfigError) as error:
        _parse(data)
    assert message in str(error.value)
    assert str(error.value).startswith("config.json")


def test_zero_devices_warns() -> None:
    config = _parse({"configList": [_resource(rdmaHcaMax=0)]})
    assert config.resources[0].rdma_hca_max == 0
    assert any("rdmaHcaMax: 0" in w for w in config.warnings)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(RdmaConfigError, match=r"config\.json: no such file"):
        load_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(RdmaConfigError, match=r"config\.json: not valid JSON"):
        load_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"configList": [_resource()]}), encoding="utf-8")
    assert load_config(tmp_path / "config.json").resources[0].name == "rdma_shared_device_a"
