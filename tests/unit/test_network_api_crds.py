"""The Network Operator's CRDs, samples and `gpu-operator validate` on its kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel

from gpu_operator.api.network.crd import NAD_FILE, network_crds
from gpu_operator.api.network.imagespec import ImageSpec, image_of
from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.api.validation import load_file, validate_document
from gpu_operator.cli.main import cli
from tests.conftest import REPO, SAMPLES

CRDS = network_crds()
MODELS: dict[str, type[BaseModel]] = {
    "mellanox.com_nicclusterpolicies.yaml": NicClusterPolicy,
    "mellanox.com_nicnodepolicies.yaml": NicNodePolicy,
    "mellanox.com_macvlannetworks.yaml": MacvlanNetwork,
    "mellanox.com_hostdevicenetworks.yaml": HostDeviceNetwork,
    "mellanox.com_ipoibnetworks.yaml": IPoIBNetwork,
}


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_names_scope_and_printer_columns() -> None:
    shorts = {"mellanox.com_nicclusterpolicies.yaml": ["ncp"], "mellanox.com_nicnodepolicies.yaml": ["nicnode", "nnp"]}
    for name, model in MODELS.items():
        spec = CRDS[name]["spec"]
        assert spec["group"] == "mellanox.com"
        assert spec["scope"] == "Cluster"
        assert CRDS[name]["metadata"]["name"] == f"{model.crd_plural}.mellanox.com"  # type: ignore[attr-defined]
        assert spec["names"]["plural"] == model.crd_plural  # type: ignore[attr-defined]
        assert spec["names"].get("shortNames", []) == shorts.get(name, [])
        version = spec["versions"][0]
        assert version["name"] == "v1alpha1"
        assert version["subresources"] == {"status": {}}
        assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
            ("Status", ".status.state"),
            ("Age", ".metadata.creationTimestamp"),
        ]


def test_nad_crd_is_the_plumbing_wg_definition() -> None:
    nad = CRDS[NAD_FILE]
    assert nad["metadata"]["name"] == "network-attachment-definitions.k8s.cni.cncf.io"
    assert nad["spec"]["scope"] == "Namespaced"
    assert nad["spec"]["names"]["kind"] == "NetworkAttachmentDefinition"
    assert nad["spec"]["names"]["shortNames"] == ["nad", "net-attach-def"]
    version = nad["spec"]["versions"][0]
    assert version["name"] == "v1"
    assert "subresources" not in version
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"] == {
        "config": {"type": "string", "description": spec["properties"]["config"]["description"]}
    }


def test_status_and_defaults_in_the_schema() -> None:
    ncp = _schema("mellanox.com_nicclusterpolicies.yaml")
    status = ncp["properties"]["status"]
    assert status["required"] == ["state"]
    assert status["properties"]["state"]["enum"] == ["ready", "notReady", "ignore", "error"]
    assert status["properties"]["appliedStates"]["items"]["required"] == ["name", "state"]
    ofed = ncp["properties"]["spec"]["properties"]["ofedDriver"]["properties"]
    assert ofed["terminationGracePeriodSeconds"]["default"] == 300
    policy = ofed["upgradePolicy"]["properties"]
    assert policy["maxParallelUpgrades"] == {**policy["maxParallelUpgrades"], "default": 1, "minimum": 0}
    assert policy["drain"]["properties"]["timeoutSeconds"]["default"] == 300
    assert "global" in ncp["properties"]["spec"]["properties"]
    mode = _schema("mellanox.com_macvlannetworks.yaml")["properties"]["spec"]["properties"]["mode"]
    assert mode["enum"] == ["bridge", "private", "vepa", "passthru"]
    net_status = _schema("mellanox.com_hostdevicenetworks.yaml")["properties"]["status"]
    assert net_status["properties"]["state"]["enum"] == ["notReady", "ready", "error"]
    nnp = _schema("mellanox.com_nicnodepolicies.yaml")
    assert nnp["required"] == ["spec"]
    assert nnp["properties"]["spec"]["required"] == ["nodeSelector"]
    assert nnp["x-kubernetes-validations"][0]["rule"] == "size(self.metadata.name) <= 30"


def _validations(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, the schema node the rule sits on, the rule) for every x-kubernetes-validations entry."""
    out = [(path, schema, rule) for rule in schema.get("x-kubernetes-validations", [])]
    for key, sub in schema.get("properties", {}).items():
        out += _validations(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        out += _validations(schema["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_field_path_exists_and_json_rules_stay_offline(name: str) -> None:
    """The API server refuses a CRD whose rule names a fieldPath its schema lacks."""
    rules = _validations(_schema(name))
    for where, node, rule in rules:
        if "fieldPath" in rule:
            target = node
            for part in rule["fieldPath"].lstrip(".").split("."):
                assert part in target.get("properties", {}), f"{name}{where}: {rule['fieldPath']}"
                target = target["properties"][part]
        assert "JSON" not in rule["message"], f"{name}{where}: an offline-only rule reached the CRD"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_committed_crd_is_current(name: str) -> None:
    committed = yaml.safe_load((REPO / "deploy" / "crds" / name).read_text(encoding="utf-8"))
    assert committed == CRDS[name]


NETWORK_SAMPLES = [
    "nicclusterpolicy.yaml",
    "nicclusterpolicy-minimal.yaml",
    "nicnodepolicy.yaml",
    "macvlannetwork.yaml",
    "hostdevicenetwork.yaml",
    "ipoibnetwork.yaml",
]


@pytest.mark.parametrize("sample", NETWORK_SAMPLES)
def test_sample_validates_and_every_image_resolves(sample: str) -> None:
    (doc,) = load_file(SAMPLES / sample)
    result = validate_document(doc, source=sample)
    assert result.errors == ()
    spec = getattr(result.model, "spec", None)
    global_ = getattr(spec, "global_", None)
    images = [v for v in _models(spec) if isinstance(v, ImageSpec)]
    for image in images:
        assert "/" in image_of(image, global_)


def _models(value: Any) -> list[BaseModel]:
    if not isinstance(value, BaseModel):
        return []
    out = [value]
    for name in type(value).model_fields:
        out += _models(getattr(value, name))
    return out


def test_samples_cover_the_sections_they_promise() -> None:
    full = load_file(SAMPLES / "nicclusterpolicy.yaml")[0]["spec"]
    assert {"ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin", "secondaryNetwork", "nvIpam"} <= set(full)
    assert set(full["secondaryNetwork"]) == {"multus", "cniPlugins", "ipoib"}
    assert set(full["ofedDriver"]["upgradePolicy"]) == {
        "autoUpgrade", "maxParallelUpgrades", "safeLoad", "waitForCompletion", "drain",
    }  # fmt: skip
    minimal = load_file(SAMPLES / "nicclusterpolicy-minimal.yaml")[0]["spec"]
    assert set(minimal) == {"ofedDriver", "rdmaSharedDevicePlugin"}
    for sample in ("nicclusterpolicy.yaml", "nicclusterpolicy-minimal.yaml"):
        assert load_file(SAMPLES / sample)[0]["metadata"]["name"] == "nic-cluster-policy"


def test_validate_names_file_kind_and_field(tmp_path: Path) -> None:
    doc = load_file(SAMPLES / "nicclusterpolicy-minimal.yaml")[0]
    doc["spec"]["ofedDriver"]["upgradePolicy"] = {"maxParallelUpgrades": "two"}
    doc["spec"]["rdmaSharedDevicePlugin"]["config"] = "{"
    bad = tmp_path / "nicclusterpolicy.yaml"
    bad.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(bad), str(SAMPLES / "macvlannetwork.yaml")])
    assert result.exit_code == 1
    prefix = "nicclusterpolicy.yaml: NicClusterPolicy nic-cluster-policy: "
    assert f"{prefix}spec.ofedDriver.upgradePolicy.maxParallelUpgrades: must be an integer" in result.output
    assert f"{prefix}spec.rdmaSharedDevicePlugin.config: not valid JSON: " in result.output
    assert "ok    " in result.output
    assert "MacvlanNetwork macvlan-net" in result.output
