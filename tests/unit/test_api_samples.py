"""The samples validate, round-trip without losing or renaming a field, and set every field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from gpu_operator.api import clusterpolicy as cp
from gpu_operator.api import telemetry
from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.api.nvidiadriver import NVIDIADriver, NVIDIADriverSpec
from gpu_operator.api.validation import load_file, to_manifest, validate_document
from tests.conftest import SAMPLES

SAMPLE_DOCS = [(f.name, i, d) for f in sorted(SAMPLES.glob("*.yaml")) for i, d in enumerate(load_file(f))]


@pytest.mark.parametrize(("name", "index", "doc"), SAMPLE_DOCS, ids=[f"{n}#{i}" for n, i, _ in SAMPLE_DOCS])
def test_sample_validates_and_round_trips(name: str, index: int, doc: dict[str, Any]) -> None:
    result = validate_document(doc, source=name)
    assert result.errors == ()
    assert result.model is not None
    assert to_manifest(result.model) == doc


def _owner(model: type[BaseModel], field: str) -> str:
    """The class that declares ``field`` (inherited fields count once, for their declaring class)."""
    for klass in model.__mro__:
        if field in getattr(klass, "__annotations__", {}):
            return klass.__name__
    return model.__name__


def _declared(model: type[BaseModel], seen: set[type[BaseModel]] | None = None) -> set[tuple[str, str]]:
    """Every (declaring class, field) reachable from ``model``."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    out = {(_owner(model, name), name) for name in model.model_fields}
    for info in model.model_fields.values():
        for sub in _models_in(info.annotation):
            out |= _declared(sub, seen)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _used(value: Any) -> set[tuple[str, str]]:
    """Every (declaring class, field) that a parsed document sets."""
    out: set[tuple[str, str]] = set()
    if isinstance(value, BaseModel):
        for name in value.model_fields_set:
            out.add((_owner(type(value), name), name))
            out |= _used(getattr(value, name))
    elif isinstance(value, list):
        for item in value:
            out |= _used(item)
    elif isinstance(value, dict):
        for item in value.values():
            out |= _used(item)
    return out


@pytest.mark.parametrize(
    ("sample", "spec_model"),
    [("clusterpolicy-full.yaml", ClusterPolicySpec), ("nvidiadriver.yaml", NVIDIADriverSpec)],
)
def test_full_samples_set_every_field(sample: str, spec_model: type[BaseModel]) -> None:
    declared = _declared(spec_model)
    used: set[tuple[str, str]] = set()
    for doc in load_file(SAMPLES / sample):
        used |= _used(spec_model.model_validate(doc["spec"]))
    assert sorted(declared - used) == []


def test_full_policy_names_every_section() -> None:
    doc = load_file(SAMPLES / "clusterpolicy-full.yaml")[0]
    sections = {f.alias or n for n, f in ClusterPolicySpec.model_fields.items()}
    assert set(doc["spec"]) == sections


def test_minimal_policy_gets_reference_defaults() -> None:
    """Defaults from ../shared/reference/clusterpolicy-api.md, written out by hand on purpose."""
    doc = load_file(SAMPLES / "clusterpolicy-minimal.yaml")[0]
    model = ClusterPolicy.model_validate(doc)
    spec = to_manifest(model, with_defaults=True)["spec"]
    assert spec["operator"] == {"runtimeClass": "nvidia"}
    assert spec["daemonsets"] == {"updateStrategy": "RollingUpdate"}
    assert spec["driver"] == {"kernelModuleType": "auto"}
    assert spec["toolkit"] == {"installDir": "/usr/local/nvidia"}
    assert spec["devicePlugin"] == {"mps": {"root": "/run/nvidia/mps"}}
    assert spec["cdi"] == {"enabled": True, "default": False, "nriPluginEnabled": False}
    assert spec["sandboxWorkloads"] == {"defaultWorkload": "container", "mode": "kubevirt"}
    assert spec["hostPaths"] == {"kubeletRootDir": "/var/lib/kubelet"}
    for section in (
        "dcgm",
        "dcgmExporter",
        "gfd",
        "mig",
        "migManager",
        "nodeStatusExporter",
        "validator",
        "psa",
    ):
        assert spec[section] == {}, section
    # Sections whose presence means something stay absent.
    for absent in ("gds", "gdrcopy", "psp", "kataManager"):
        assert absent not in spec
    assert "upgradePolicy" not in spec["driver"]


def test_upgrade_policy_defaults_when_present() -> None:
    cp = ClusterPolicy.model_validate(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": {"driver": {"upgradePolicy": {}}},
        }
    )
    policy = to_manifest(cp, with_defaults=True)["spec"]["driver"]["upgradePolicy"]
    assert policy == {"autoUpgrade": False, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
    nvd = NVIDIADriver.model_validate(
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "d"},
            "spec": {"upgradePolicy": {"drain": {}}},
        }
    )
    spec = to_manifest(nvd, with_defaults=True)["spec"]
    assert spec["upgradePolicy"] == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "drain": {
            "enable": False,
            "force": False,
            "timeoutSeconds": 300,
            "deleteEmptyDir": False,
        },
    }
    assert spec["driverType"] == "gpu"
    assert spec["image"] == "nvcr.io/nvidia/driver"
    assert spec["default"] is False
    assert spec["kernelModuleType"] == "auto"


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def test_upstream_spellings_are_kept() -> None:
    """Names that a camel-case generator would get wrong keep their upstream spelling."""
    assert "use_ocp_driver_toolkit" in _aliases(cp.OperatorSpec)
    assert "useNvidiaDriverCRD" in _aliases(cp.DriverSpec)
    assert "rootFS" in _aliases(cp.HostPathsSpec)
    assert "vfioPCI" in _aliases(cp.ValidatorSpec)
    assert {"hostPID", "enablePodUID"} <= set(_aliases(telemetry.DCGMExporterSpec))


def test_round_trip_keeps_unknown_metadata(tmp_path: Path) -> None:
    doc = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "p", "uid": "1234", "resourceVersion": "7", "finalizers": ["x"]},
        "spec": {"driver": {"env": [{"name": "A", "value": "1"}]}},
        "status": {
            "state": "ready",
            "namespace": "gpu-operator",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "observedGeneration": 3,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reason": "Reconciled",
                    "message": "ok",
                }
            ],
        },
    }
    result = validate_document(doc)
    assert result.ok
    assert result.model is not None
    assert to_manifest(result.model) == doc
