"""The stricter rules refuse nothing that upstream's v26.7 samples and Helm values produce.

The Helm chart renders the values into a ClusterPolicy (``tests/integration/test_helm_chart.py`` does
it with helm); here :func:`_policy_from_values` mirrors Helm's merge over the chart's values.yaml and
``templates/clusterpolicy.yaml`` (sections copied, chart-only keys dropped, empty values pruned) so the
check runs without helm. (Checked once against ``helm template``: the same spec.)
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpu_operator.api.validation import validate_document, validate_file
from tests.conftest import REPO

UPSTREAM = REPO / "tests" / "data" / "upstream"
JSON = dict[str, Any]

#: The values sections the chart copies into the spec as they are (templates/clusterpolicy.yaml).
_COPIED = ("daemonsets", "validator", "mig", "psa", "cdi", "sandboxWorkloads", "hostPaths", "toolkit", "dcgm", "gfd",
           "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager",
           "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager", "startupTaint", "maintenanceWindows",
           "remediation")  # fmt: skip


def _prune(value: JSON) -> JSON:
    """The chart's gpu-operator.prune: empty strings, lists and maps go; booleans and numbers stay."""
    out: JSON = {}
    for key, item in value.items():
        if isinstance(item, dict):
            if inner := _prune(item):
                out[key] = inner
        elif isinstance(item, bool | int | float) or item:
            out[key] = item
    return out


def _coalesce(defaults: JSON, given: JSON) -> JSON:
    """Helm's merge of a values file over the chart's values.yaml: maps merge, anything else replaces."""
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _policy_from_values(given: JSON) -> JSON:
    chart = yaml.safe_load((REPO / "deploy" / "helm" / "gpu-operator" / "values.yaml").read_text(encoding="utf-8"))
    values = _coalesce(chart, given)
    spec: JSON = {name: copy.deepcopy(values[name]) for name in _COPIED if name in values}
    for name in ("validator", "nodeStatusExporter"):
        section = spec.get(name) or {}
        if section.get("repository") and section.get("image") and not section.get("version"):
            section["version"] = chart["nvidiaOperatorVersion"]  # the chart's appVersion stand-in
    for name in ("devicePlugin", "dcgmExporter", "migManager"):
        section = copy.deepcopy(values[name])
        if section.get("config"):
            section["config"] = {k: v for k, v in section["config"].items() if k not in ("create", "data")}
        spec[name] = section
    kept = ("runtimeClass", "defaultRuntime", "initContainer", "use_ocp_driver_toolkit")
    spec["operator"] = {k: values["operator"][k] for k in kept if k in values["operator"]}
    driver = {k: copy.deepcopy(v) for k, v in values["driver"].items() if k != "nvidiaDriverCRD"}
    driver["useNvidiaDriverCRD"] = values["driver"]["nvidiaDriverCRD"]["enabled"]
    policy = driver.get("upgradePolicy") or {}
    if "gpuPodDeletion" in policy:
        deletion = policy.pop("gpuPodDeletion")
        policy.setdefault("podDeletion", deletion)
    spec["driver"] = driver
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": _prune(spec)}  # fmt: skip


@pytest.mark.parametrize("name", ["clusterpolicy-sample-v26.7.yaml", "nvidiadriver-sample-v26.7.yaml"])
def test_upstream_samples_validate_with_no_error(name: str) -> None:
    results = validate_file(UPSTREAM / name)
    assert [str(e) for r in results for e in r.errors] == []
    assert results


def test_upstream_values_rendered_as_the_chart_does_validate_with_no_error() -> None:
    values = yaml.safe_load((UPSTREAM / "values-v26.7.yaml").read_text(encoding="utf-8"))
    doc = _policy_from_values(values)
    # The mirror keeps what matters here: host paths, image sections, env and tolerations.
    assert doc["spec"]["hostPaths"] == {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"}
    assert doc["spec"]["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}
    assert doc["spec"]["driver"]["manager"]["env"][0]["name"] == "ENABLE_GPU_POD_EVICTION"
    assert [str(e) for e in validate_document(doc).errors] == []


def test_a_tightened_value_in_the_upstream_sample_is_refused() -> None:
    """The check above has teeth: the same sample with one host path made unsafe fails."""
    values = yaml.safe_load((UPSTREAM / "values-v26.7.yaml").read_text(encoding="utf-8"))
    values["toolkit"]["installDir"] = "/usr"
    errors = [str(e) for e in validate_document(_policy_from_values(values)).errors]
    assert errors == ["spec.toolkit.installDir: must not be the system directory /usr (got '/usr')"]


def test_the_charts_own_defaults_validate_with_no_error() -> None:
    assert [str(e) for e in validate_document(_policy_from_values({})).errors] == []
