"""The committed CRDs under deploy/crds are exactly what the models generate, and are structural."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpu_operator.api.network.crd import NAD_FILE
from gpu_operator.cli.crds import all_crds, render_crd_files
from tests.conftest import REPO

CRD_DIR = REPO / "deploy" / "crds"


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_committed_crd_matches_models(name: str) -> None:
    committed = CRD_DIR / name
    assert committed.exists(), f"{committed} is missing: run `make generate`"
    assert committed.read_text(encoding="utf-8") == render_crd_files()[name], (
        f"{committed} drifted from the models: run `make generate` and commit the result"
    )


def test_no_stray_crd_files() -> None:
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(all_crds())


def _walk(schema: dict[str, Any], path: str) -> list[str]:
    """Structural-schema problems: every node needs a type (or int-or-string / preserve-unknown)."""
    problems: list[str] = []
    special = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    if "type" not in schema and not special:
        problems.append(f"{path}: no type")
    if "$ref" in schema or "allOf" in schema or "oneOf" in schema:
        problems.append(f"{path}: non-structural keyword")
    if "anyOf" in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: anyOf outside int-or-string")
    for key, sub in schema.get("properties", {}).items():
        problems += _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        problems += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += _walk(schema["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_schema_is_structural(name: str) -> None:
    version = all_crds()[name]["spec"]["versions"][0]
    assert _walk(version["schema"]["openAPIV3Schema"], "") == []
    # The NetworkAttachmentDefinition CRD is the Network Plumbing WG's, which has no status.
    assert version.get("subresources") == (None if name == NAD_FILE else {"status": {}})


def test_clusterpolicy_crd_shape() -> None:
    crd = yaml.safe_load((CRD_DIR / "nvidia.com_clusterpolicies.yaml").read_text(encoding="utf-8"))
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Status", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["mig"]["properties"]["strategy"]["enum"] == ["none", "single", "mixed"]
    assert spec["properties"]["cdi"]["properties"]["enabled"]["default"] is True
    assert spec["properties"]["toolkit"]["default"] == {}
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert any("nriPluginEnabled" in r for r in rules)
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["state"]["enum"] == ["ignored", "ready", "notReady"]
    cond = status["properties"]["conditions"]["items"]
    assert "observedGeneration" in cond["properties"]
    assert set(cond["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}


def test_nvidiadriver_crd_shape() -> None:
    crd = yaml.safe_load((CRD_DIR / "nvidia.com_nvidiadrivers.yaml").read_text(encoding="utf-8"))
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["names"]["shortNames"] == ["nvd", "nvdriver", "nvdrivers"]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Status", "Default", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["driverType"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert spec["properties"]["usePrecompiled"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    policy = spec["properties"]["upgradePolicy"]["properties"]
    assert policy["autoUpgrade"]["default"] is True
    assert policy["maxUnavailable"]["x-kubernetes-int-or-string"] is True
