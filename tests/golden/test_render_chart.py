"""The Helm chart's generated files match what `hack/generate.py` (run by `make generate`) writes:
the CRDs (copied from deploy/crds) and the operator's RBAC template (from render/rbac.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from gpu_operator.render.rbac import operator_rules
from tests.conftest import REPO

CHART = REPO / "deploy" / "helm" / "gpu-operator"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_generate", REPO / "hack" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
FILES: dict[Path, str] = GENERATOR.expected_files()


@pytest.mark.parametrize("path", sorted(FILES), ids=[str(p.relative_to(REPO)) for p in sorted(FILES)])
def test_generated_chart_file_is_current(path: Path) -> None:
    assert path.exists(), f"{path} is missing: run `make generate`"
    assert path.read_text(encoding="utf-8") == FILES[path], f"{path.name} drifted: run `make generate`"


def test_chart_crds_are_exactly_the_gpu_operator_crds() -> None:
    # The Network Operator's CRDs (mellanox.com, the NAD) ship with its own chart, not this one.
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == sorted(
        p.name for p in (REPO / "deploy" / "crds").glob("nvidia.com_*.yaml")
    )
    assert GENERATOR.stale_chart_crds() == []


def test_check_mode_reports_nothing_to_do() -> None:
    assert GENERATOR.main(["--check"]) == 0


def test_rbac_template_holds_the_operator_rules() -> None:
    # With the template expressions replaced, the documents are the rules from render/rbac.py.
    text = (CHART / "templates" / "rbac.yaml").read_text(encoding="utf-8")
    text = text.replace("{{ .Release.Namespace | quote }}", '"ns"').replace("{{ .Release.Namespace }}", "ns")
    text = text.replace('{{- include "gpu-operator.labels" . | nindent 4 }}', "{}")
    text = text.replace('{{ include "gpu-operator.serviceAccountName" . }}', "gpu-operator")
    docs = {d["kind"]: d for d in yaml.safe_load_all(text)}
    cluster, namespaced = operator_rules(namespace="ns")
    assert docs["ClusterRole"]["rules"] == cluster
    assert docs["Role"]["rules"] == namespaced
    assert docs["ClusterRoleBinding"]["subjects"][0]["name"] == "gpu-operator"
