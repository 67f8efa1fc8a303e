"""`gpu-operator render` output for the reference scenarios equals the committed golden files.

Scenarios: the default policy (the minimal sample), every operand enabled, every operand disabled,
an air-gapped install (the full sample: private registry, digests of nothing, pull secrets, proxy
env), sandbox workloads with Kata, and NVIDIADrivers routed to four pools (two precompiled kernels,
two OSes). Regenerate after an intended change with
``GPU_OPERATOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/test_render_golden.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.api.validation import load_file, validate_document
from gpu_operator.cli.render import render_text
from gpu_operator.render import ClusterFacts, OperatorSettings, facts_from_nodes, node_info
from gpu_operator.render.facts import NodeInfo
from tests.conftest import REPO, SAMPLES

DATA = REPO / "tests" / "golden" / "data" / "render"
INPUTS = DATA / "inputs"
AGENT_IMAGE = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"


@dataclass(frozen=True)
class Scenario:
    name: str
    documents: tuple[Path, ...]
    nodes: Path
    service_monitors: bool = False


SCENARIOS = (
    Scenario("default", (SAMPLES / "clusterpolicy-minimal.yaml",), INPUTS / "nodes.yaml"),
    Scenario("all-enabled", (INPUTS / "all-enabled.yaml",), INPUTS / "nodes.yaml", service_monitors=True),
    Scenario("all-disabled", (INPUTS / "all-disabled.yaml",), INPUTS / "nodes.yaml"),
    Scenario("air-gapped", (SAMPLES / "clusterpolicy-full.yaml",), INPUTS / "nodes.yaml", service_monitors=True),
    Scenario("sandbox-kata", (INPUTS / "sandbox-kata.yaml",), INPUTS / "nodes.yaml"),
    Scenario(
        "nvidiadriver-pools",
        (INPUTS / "nvidiadriver-policy.yaml", SAMPLES / "nvidiadriver.yaml"),
        INPUTS / "driver-pools-nodes.yaml",
    ),
)


@dataclass(frozen=True)
class Inputs:
    policy: ClusterPolicy | None
    drivers: list[NVIDIADriver]
    nodes: list[NodeInfo]
    facts: ClusterFacts


def _nodes(path: Path) -> list[NodeInfo]:
    docs: list[Any] = []
    for doc in load_file(path):
        docs += doc if isinstance(doc, list) else doc.get("items", [doc])
    return [node_info(d) for d in docs]


def inputs(scenario: Scenario) -> Inputs:
    policy: ClusterPolicy | None = None
    drivers: list[NVIDIADriver] = []
    for path in scenario.documents:
        for doc in load_file(path):
            model = validate_document(doc, source=str(path)).model
            if isinstance(model, ClusterPolicy):
                policy = model
            elif isinstance(model, NVIDIADriver):
                drivers.append(model)
            else:
                raise AssertionError(f"{path}: not a valid ClusterPolicy or NVIDIADriver")
    nodes = _nodes(scenario.nodes)
    precompiled = policy is not None and bool(policy.spec.driver.use_precompiled)
    facts = facts_from_nodes(
        nodes, namespace="gpu-operator", precompiled=precompiled, has_service_monitor_crd=scenario.service_monitors
    )
    return Inputs(policy=policy, drivers=drivers, nodes=nodes, facts=facts)


def rendered(scenario: Scenario) -> tuple[str, list[str]]:
    data = inputs(scenario)
    warnings: list[str] = []
    text = render_text(
        policy=data.policy,
        drivers=data.drivers,
        nodes=data.nodes,
        facts=data.facts,
        operator=OperatorSettings(agent_image=AGENT_IMAGE),
        warn=warnings.append,
    )
    return text, warnings


def rendered_objects(scenario: Scenario) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered(scenario)[0]) if d]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_render_matches_golden(scenario: Scenario) -> None:
    text, warnings = rendered(scenario)
    golden = DATA / f"{scenario.name}.yaml"
    body = text + "".join(f"# warning: {w}\n" for w in warnings)
    if os.environ.get("GPU_OPERATOR_UPDATE_GOLDEN") == "1":
        golden.write_text(body, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing: run with GPU_OPERATOR_UPDATE_GOLDEN=1"
    assert body == golden.read_text(encoding="utf-8"), f"{golden.name} drifted: review, then regenerate"


def test_every_state_appears_in_the_default_output() -> None:
    text, _ = rendered(SCENARIOS[0])
    for state in ("pre-requisites", "state-driver", "state-operator-validation", "gpu-feature-discovery"):
        assert f"# {state}\n" in text
    assert "# state-node-status-exporter: disabled" in text


def test_nvidiadriver_scenario_has_four_pools_and_skips_the_unlabelled_node() -> None:
    text, warnings = rendered(SCENARIOS[-1])
    driver_sets = [o for o in yaml.safe_load_all(text) if o and o["kind"] == "DaemonSet" and "pool" not in o]
    pools = [d["metadata"]["name"] for d in driver_sets if d["metadata"]["name"].startswith("nvidia-gpu-driver-")]
    assert len(pools) == 4
    assert any("gpu-no-nfd" in w for w in warnings)
