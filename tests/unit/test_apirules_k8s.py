"""Kubernetes' own rules (``gpu_operator.api.k8srules``) applied to every model, offline and in the CRDs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpu_operator.api import k8srules
from gpu_operator.api.base import IntOrPercent
from gpu_operator.api.crd import crds
from gpu_operator.api.network.crd import network_crds
from gpu_operator.api.validation import validate_document

JSON = dict[str, Any]


def _policy(spec: JSON, *, name: str = "cluster-policy") -> JSON:
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}


def _driver(spec: JSON, *, name: str = "pool-a") -> JSON:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name}, "spec": spec}


def _errors(doc: JSON) -> list[str]:
    return [str(e) for e in validate_document(doc).errors]


def _one_error(doc: JSON, *, path: str) -> str:
    errors = _errors(doc)
    assert len(errors) == 1, errors
    assert errors[0].startswith(path + ": "), errors
    assert "\n" not in errors[0].rstrip("\n").replace("\\n", "")
    return errors[0]


# --- anchored matching ------------------------------------------------------------------------------------


def test_pydantic_patterns_do_not_accept_a_trailing_newline() -> None:
    """pydantic-core's Rust regex: ``$`` is the end of the text, unlike Python's re.match."""

    class M(BaseModel):
        model_config = ConfigDict(strict=True)
        a: str = Field(pattern=r"^[a-z]+$")

    assert re.match(r"^[a-z]+$", "abc\n") is not None  # the trap the models avoid
    with pytest.raises(ValidationError):
        M(a="abc\n")


@pytest.mark.parametrize("value", ["50%\n", "25%\n\n", "1\n"])
def test_max_unavailable_with_a_trailing_newline_is_refused(value: str) -> None:
    error = _one_error(
        _policy({"driver": {"upgradePolicy": {"maxUnavailable": value}}}),
        path="spec.driver.upgradePolicy.maxUnavailable",
    )
    assert "percentage" in error


def test_int_or_percent_still_takes_counts_and_percentages() -> None:
    class M(BaseModel):
        v: IntOrPercent

    assert M(v="100%").v == "100%"
    assert M(v=3).v == 3
    with pytest.raises(ValidationError):
        M(v="101%")


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"driver": {"resources": {"limits": {"cpu": "1\n"}}}}, "spec.driver.resources.limits.cpu"),
        ({"driver": {"version": "595.91.07\n"}}, "spec.driver.version"),
        ({"driver": {"upgradePolicy": {"drain": {"podSelector": "app=x\n,"}}}}, "spec.driver.upgradePolicy.drain"),
    ],
)
def test_other_fields_with_a_trailing_newline_are_refused(spec: JSON, path: str) -> None:
    assert any(e.startswith(path) for e in _errors(_policy(spec))), _errors(_policy(spec))


def _patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for v in node.values() for p in _patterns(v)]
    if isinstance(node, list):
        return [p for v in node for p in _patterns(v)]
    return []


def test_every_crd_pattern_is_anchored_and_runs_on_the_rust_engine() -> None:
    """pydantic falls back to Python's re (whose ``$`` accepts "\\n") for lookarounds: none may appear."""
    patterns = set(_patterns([*crds().values(), *network_crds().values()]))
    assert len(patterns) > 10
    for pattern in patterns:
        assert pattern.startswith("^"), pattern
        assert pattern.endswith("$"), pattern
        assert not re.search(r"\(\?(=|!|<=|<!)", pattern), pattern


def test_no_bare_match_or_search_on_anchored_patterns_in_the_api() -> None:
    """Every Python regex in the API is used with fullmatch (``$`` in re accepts a trailing newline)."""
    api = Path(k8srules.__file__).parent
    offenders = [
        f"{p.name}:{n}"
        for p in sorted(api.rglob("*.py"))
        if p.name not in ("windows.py", "yamltext.py")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.(match|search)\(", line) and "fullmatch" not in line and "matches(" not in line
    ]
    assert offenders == []


# --- integers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (_policy({"driver": {"upgradePolicy": {"maxParallelUpgrades": 10**30}}}),
         "spec.driver.upgradePolicy.maxParallelUpgrades"),
        (_policy({"driver": {"startupProbe": {"periodSeconds": 2**31}}}), "spec.driver.startupProbe.periodSeconds"),
        (_driver({"upgradePolicy": {"drain": {"timeoutSeconds": 2**31}}}), "spec.upgradePolicy.drain.timeoutSeconds"),
        (_policy({"driver": {"upgradePolicy": {"maxUnavailable": 2**40}}}), "spec.driver.upgradePolicy.maxUnavailable"),
    ],
)  # fmt: skip
def test_int32_overflow_is_refused(doc: JSON, path: str) -> None:
    _one_error(doc, path=path)


def test_int32_fields_carry_format_and_bounds_in_the_crd() -> None:
    schema = crds()["nvidia.com_clusterpolicies.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    probe = schema["properties"]["spec"]["properties"]["driver"]["properties"]["startupProbe"]["properties"]
    assert probe["periodSeconds"]["format"] == "int32"
    assert probe["periodSeconds"]["minimum"] == 1  # the field's own ge wins over int32's minimum
    assert probe["periodSeconds"]["maximum"] == 2**31 - 1


def test_user_ids_follow_kubernetes_bounds() -> None:
    ctx = {"daemonsets": {"podSecurityContext": {"runAsUser": 2**31}}}
    _one_error(_policy(ctx), path="spec.daemonsets.podSecurityContext.runAsUser")
    assert _errors(_policy({"daemonsets": {"podSecurityContext": {"runAsUser": 65534}}})) == []


# --- names ------------------------------------------------------------------------------------------------


def test_a_long_nvidiadriver_name_is_refused() -> None:
    name = "a" * 64  # a valid DNS subdomain, but too long for the label value it becomes
    assert _errors(_driver({}, name=name)) == [
        "metadata.name must be at most 63 characters (it is a label value on the driver's nodes, DaemonSets and pods)"
    ]
    assert _errors(_driver({}, name="a" * 63)) == []


def test_the_nvidiadriver_name_rule_is_in_the_crd() -> None:
    schema = crds()["nvidia.com_nvidiadrivers.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert {"rule": "size(self.metadata.name) <= 63"}.items() <= schema["x-kubernetes-validations"][0].items()


@pytest.mark.parametrize("name", ["Policy", "a_b", "-a", "a" * 254, "a..b"])
def test_object_names_must_be_dns_subdomains(name: str) -> None:
    _one_error(_policy({}, name=name), path="metadata.name")


# --- labels, selectors, env, images, quantities ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"nodeSelector": {"Bad Key": "x"}}, "spec.nodeSelector.Bad Key"),
        ({"nodeSelector": {"example.com/" + "k" * 64: "x"}}, "spec.nodeSelector"),
        ({"nodeSelector": {"a/b/c": "x"}}, "spec.nodeSelector.a/b/c"),
        ({"nodeSelector": {"pool": "v" * 64}}, "spec.nodeSelector.pool"),
        ({"nodeSelector": {"pool": "-x"}}, "spec.nodeSelector.pool"),
        ({"labels": {"team": "a b"}}, "spec.labels.team"),
        ({"annotations": {"not a key": "anything"}}, "spec.annotations.not a key"),
    ],
)
def test_label_keys_and_values_follow_kubernetes(spec: JSON, path: str) -> None:
    assert any(e.startswith(path) for e in _errors(_driver(spec))), _errors(_driver(spec))


def test_valid_labels_pass() -> None:
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100_80GB.HBM3", "pool": ""}, "labels": {"a": "b"}}
    assert _errors(_driver(spec)) == []


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_match_expressions_exists_take_no_values(operator: str) -> None:
    term = {"matchExpressions": [{"key": "pool", "operator": operator, "values": ["a"]}]}
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    errors = _errors(_driver({"nodeAffinity": affinity}))
    assert any("matchExpressions[0].values" in e for e in errors), errors


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ({"key": "pool", "operator": "In", "values": ["a"]}, True),
        ({"key": "pool", "operator": "In", "values": []}, False),
        ({"key": "pool", "operator": "In"}, False),
        ({"key": "pool", "operator": "Exists"}, True),
        ({"key": "gen", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "gen", "operator": "Gt", "values": ["three"]}, False),
        ({"key": "gen", "operator": "Lt", "values": ["1", "2"]}, False),
        ({"key": "pool", "operator": "Matches", "values": ["a"]}, False),
        ({"key": "Bad Key", "operator": "Exists"}, False),
    ],
)
def test_node_selector_requirements(expr: JSON, ok: bool) -> None:
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}
    assert (_errors(_driver({"nodeAffinity": affinity})) == []) is ok


@pytest.mark.parametrize(
    ("selector", "ok"),
    [
        ("", True),
        ("app=x", True),
        ("app==x,tier!=web", True),
        ("app in (a, b),!legacy,gen>2", True),
        ("example.com/pool notin (x)", True),
        ("app=", True),
        ("app=x y", False),
        ("app in ()", False),
        ("Bad Key=x", False),
        ("app=x\n", False),
        ("app=" + "v" * 64, False),
        ("app=x;rm -rf /", False),
    ],
)
def test_label_selector_strings(selector: str, ok: bool) -> None:
    assert (k8srules.selector_problem(selector) is None) is ok
    errors = _errors(_driver({"upgradePolicy": {"waitForCompletion": {"podSelector": selector}}}))
    assert (errors == []) is ok, errors


@pytest.mark.parametrize("name", ["1ABC", "A=B", "with space", "", "A\n"])
def test_env_var_names_are_checked(name: str) -> None:
    doc = _policy({"driver": {"env": [{"name": name, "value": "x"}]}})
    assert any(e.startswith("spec.driver.env[0].name") for e in _errors(doc)), _errors(doc)


def test_env_var_names_upstream_uses_pass() -> None:
    doc = _policy({"driver": {"env": [{"name": "ENABLE_GPU_POD_EVICTION", "value": "x"}, {"name": "a.b-c_d"}]}})
    assert _errors(doc) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repository", "nvcr.io/NVIDIA"),
        ("repository", "nvcr.io/nvidia:latest"),
        ("repository", "https://nvcr.io/nvidia"),
        ("repository", "nvcr.io//nvidia"),
        ("image", "driver:"),
        ("image", "Driver"),
        ("image", "nvcr.io/nvidia/driver@sha256:xyz"),
        ("image", "driver\n"),
        ("image", "driver;curl x|sh"),
        ("version", "../../etc/passwd"),
        ("version", "-rc1"),
    ],
)
def test_bad_image_references_are_refused(field: str, value: str) -> None:
    spec = {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07", field: value}
    assert any(e.startswith(f"spec.{field}:") for e in _errors(_driver(spec))), _errors(_driver(spec))


@pytest.mark.parametrize(
    "image",
    [
        "driver",
        "nvcr.io/nvidia/driver",
        "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04",
        "localhost:5000/team/driver:v1",
        "nvcr.io/nvidia/driver@sha256:" + "a" * 64,
        "nvcr.io/nvidia/driver:595.91.07@sha256:" + "a" * 64,
        "registry.example.internal/nvidia/cloud-native/k8s-driver-manager",
    ],
)
def test_good_image_references_pass(image: str) -> None:
    assert _errors(_driver({"image": image})) == []


QUANTITIES = [("500m", True), ("1Gi", True), ("1e3", True), (".5", True), ("1GB", False), ("1 Gi", False),
              ("1Gi\n", False), ("", False)]  # fmt: skip


@pytest.mark.parametrize(("quantity", "ok"), QUANTITIES)
def test_resource_quantities(quantity: str, ok: bool) -> None:
    errors = _errors(_driver({"resources": {"requests": {"memory": quantity}}}))
    assert (errors == []) is ok, errors


def test_resource_names_are_qualified_names() -> None:
    errors = _errors(_driver({"resources": {"limits": {"nvidia.com/gpu": 1, "bad name": 1}}}))
    assert len(errors) == 1
    assert errors[0].startswith("spec.resources.limits.bad name:"), errors


def test_toleration_rules() -> None:
    def tol(t: JSON) -> list[str]:
        return _errors(_policy({"daemonsets": {"tolerations": [t]}}))

    assert tol({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}) == []
    assert tol({"operator": "Exists"}) == []
    assert tol({"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}) != []
    assert tol({"value": "x"}) != []  # an empty key needs operator Exists
    assert tol({"key": "bad key", "operator": "Exists"}) != []
    assert tol({"key": "k", "value": "v" * 64}) != []


def test_network_namespace_must_be_a_dns_label() -> None:
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "MacvlanNetwork",
        "metadata": {"name": "net"},
        "spec": {"networkNamespace": "Bad.Namespace"},
    }
    _one_error(doc, path="spec.networkNamespace")


def test_network_image_spec_is_anchored() -> None:
    """Upstream's unanchored pattern accepts any image holding one letter; ours is the reference grammar."""
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {"ofedDriver": {"image": "doca driver;id", "repository": "nvcr.io/nvidia", "version": "v1"}},
    }
    assert any(e.startswith("spec.ofedDriver.image:") for e in _errors(doc)), _errors(doc)


def test_nicnodepolicy_node_selector_keys_are_checked() -> None:
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicNodePolicy",
        "metadata": {"name": "pool"},
        "spec": {"nodeSelector": {"bad key": "x"}},
    }
    assert any(e.startswith("spec.nodeSelector.bad key:") for e in _errors(doc)), _errors(doc)


def test_every_crd_still_generates() -> None:
    assert len(crds()) == 2
    assert len(network_crds()) >= 6


def test_int64_fields_carry_no_bounds_the_api_server_would_read_as_floats() -> None:
    """kube-apiserver refuses a CRD whose int64 maximum (2^63-1) it reads back as a float."""
    crd = network_crds()["mellanox.com_nicclusterpolicies.yaml"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    grace = spec["properties"]["ofedDriver"]["properties"]["terminationGracePeriodSeconds"]
    assert grace["format"] == "int64"
    assert "maximum" not in grace
    assert grace["minimum"] == 0  # the field's own ge stays
