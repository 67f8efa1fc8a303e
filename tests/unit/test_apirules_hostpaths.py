"""Host path fields: absolute, normalised, never '/' (but rootFS), a system directory or a pseudo-filesystem."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.crd import crds
from gpu_operator.api.k8srules import HOST_PATH_CEL, host_path_problem
from gpu_operator.api.validation import validate_document

JSON = dict[str, Any]

#: Every host path field of the ClusterPolicy, as (JSON path under spec, parent section, field).
FIELDS = [
    ("devicePlugin.mps.root", {"devicePlugin": {"mps": {"root": None}}}),
    ("toolkit.installDir", {"toolkit": {"installDir": None}}),
    ("hostPaths.driverInstallDir", {"hostPaths": {"driverInstallDir": None}}),
    ("hostPaths.kubeletRootDir", {"hostPaths": {"kubeletRootDir": None}}),
    ("hostPaths.rootFS", {"hostPaths": {"rootFS": None}}),
    ("dcgmExporter.hpcJobMapping.directory", {"dcgmExporter": {"hpcJobMapping": {"directory": None}}}),
    ("kataManager.config.artifactsDir", {"kataManager": {"config": {"artifactsDir": None}}}),
]


def _spec_with(template: JSON, value: str) -> JSON:
    out: JSON = {}
    for key, sub in template.items():
        out[key] = value if sub is None else _spec_with(sub, value)
    return out


def _errors(spec: JSON) -> list[str]:
    doc = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": spec}
    return [str(e) for e in validate_document(doc).errors]


BAD = [
    ("run/nvidia/mps", "absolute"),
    ("/run/nvidia/../../etc", "'..'"),
    ("/run/./nvidia", "'.'"),
    ("/run//nvidia", "normalised"),
    ("/run/nvidia/", "normalised"),
    ("/run/nvidia\n", "normalised"),
    ("/run/nvidia mps", "normalised"),
    ("/etc", "system directory /etc"),
    ("/usr", "system directory /usr"),
    ("/var/lib", "system directory /var/lib"),
    ("/run", "system directory /run"),
    ("/proc/1/root", "inside /proc"),
    ("/sys/kernel", "inside /sys"),
    ("/dev/shm", "inside /dev"),
]


@pytest.mark.parametrize(("path", "spec"), FIELDS, ids=[f for f, _ in FIELDS])
@pytest.mark.parametrize(("value", "why"), BAD, ids=[repr(v) for v, _ in BAD])
def test_bad_host_paths_are_refused_with_one_line(path: str, spec: JSON, value: str, why: str) -> None:
    errors = _errors(_spec_with(spec, value))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"spec.{path}: "), errors
    assert why in errors[0]


@pytest.mark.parametrize(("path", "spec"), FIELDS[:-1], ids=[f for f, _ in FIELDS[:-1]])
def test_slash_is_refused_except_as_root_fs(path: str, spec: JSON) -> None:
    errors = _errors(_spec_with(spec, "/"))
    if path == "hostPaths.rootFS":
        assert errors == []
    else:
        assert errors == [f"spec.{path}: must not be '/' (the whole host) (got '/')"]


#: Fields whose empty value the renderer reads as its default (NVIDIA's chart renders unset values as "").
EMPTY_MEANS_DEFAULT = {"hostPaths.driverInstallDir", "hostPaths.kubeletRootDir", "hostPaths.rootFS",
                       "dcgmExporter.hpcJobMapping.directory"}  # fmt: skip


@pytest.mark.parametrize(("path", "spec"), FIELDS, ids=[f for f, _ in FIELDS])
def test_empty_is_the_default_only_where_the_renderer_has_one(path: str, spec: JSON) -> None:
    errors = _errors(_spec_with(spec, ""))
    if path in EMPTY_MEANS_DEFAULT:
        assert errors == []
    else:
        assert errors == [f"spec.{path}: must be an absolute path (starting with '/') (got '')"]


@pytest.mark.parametrize(
    "value",
    ["/run/nvidia/mps", "/run/nvidia/driver", "/usr/local/nvidia", "/var/lib/kubelet", "/etc/containerd/config.toml",
     "/opt/nvidia-gpu-operator/artifacts/runtimeclasses", "/var/lib/dcgm-exporter/job-mapping", "/home/.nvidia"],
)  # fmt: skip
def test_upstream_defaults_and_ordinary_paths_pass(value: str) -> None:
    assert host_path_problem(value) is None


def test_defaults_of_the_model_pass() -> None:
    spec = ClusterPolicySpec()
    assert spec.device_plugin.mps.root == "/run/nvidia/mps"
    assert spec.toolkit.install_dir == "/usr/local/nvidia"
    assert spec.host_paths.kubelet_root_dir == "/var/lib/kubelet"


def _prop(schema: JSON, dotted: str) -> JSON:
    for part in dotted.split("."):
        schema = schema["properties"][part]
    return schema


@pytest.mark.parametrize(("path", "spec"), FIELDS, ids=[f for f, _ in FIELDS])
def test_every_host_path_field_has_the_rule_in_the_crd(path: str, spec: JSON) -> None:
    root = crds()["nvidia.com_clusterpolicies.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = _prop(root, "spec." + path)
    assert field["maxLength"] == 1024
    assert field["pattern"].startswith("^")
    assert field["pattern"].endswith("$")
    rule = field["x-kubernetes-validations"][0]["rule"]
    assert HOST_PATH_CEL in rule
    assert "'/etc'" in rule
