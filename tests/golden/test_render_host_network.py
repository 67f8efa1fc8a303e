"""``<section>.hostNetwork`` on every operand section, acted on as upstream acts on it.

Upstream's ClusterPolicy has ``hostNetwork`` among the fields shared by every component section; a
section that sets it ``true`` puts its DaemonSet's pods in the host network with DNS policy
``ClusterFirstWithHostNet``. Before, only ``driver`` and ``dcgmExporter`` accepted the field, so
upstream's values files failed validation on the other sections.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.api.components import PodComponent
from gpu_operator.api.validation import load_file, validate_document
from gpu_operator.cli.render import render_text
from gpu_operator.render import OperatorSettings, facts_from_nodes
from gpu_operator.render.catalog import STATES
from tests.golden.test_render_golden import AGENT_IMAGE, INPUTS, _nodes

JSON = dict[str, Any]


def _component_sections() -> set[str]:
    """The JSON names of the spec sections that are operand sections (``Component`` models)."""
    out = set()
    for attr, info in ClusterPolicySpec.model_fields.items():
        for arg in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(arg, type) and issubclass(arg, PodComponent):
                out.add(info.alias or attr)
    return out


def _policy(host_network: set[str] | None) -> JSON:
    """The all-enabled policy, with ``hostNetwork: true`` on the named sections (None: every one)."""
    doc: JSON = next(iter(load_file(INPUTS / "all-enabled.yaml")))
    for name in _component_sections() if host_network is None else host_network:
        doc["spec"].setdefault(name, {})["hostNetwork"] = True
    return doc


def _daemonsets(doc: JSON) -> dict[str, JSON]:
    policy = validate_document(doc, source="test").model
    assert isinstance(policy, ClusterPolicy)
    nodes = _nodes(INPUTS / "nodes.yaml")
    facts = facts_from_nodes(nodes, namespace="gpu-operator", precompiled=False, has_service_monitor_crd=True)
    text = render_text(policy=policy, drivers=[], nodes=nodes, facts=facts,
                       operator=OperatorSettings(agent_image=AGENT_IMAGE), warn=lambda _: None)  # fmt: skip
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in yaml.safe_load_all(text)
        if o and o.get("kind") == "DaemonSet"
    }


def test_hostnetwork_true_on_every_section_puts_every_operand_in_the_host_network() -> None:
    sets = _daemonsets(_policy(None))
    assert len(sets) >= len([s for s in STATES if s.startswith("state-")]) // 2  # the operands really rendered
    wrong = {name: (pod.get("hostNetwork"), pod.get("dnsPolicy")) for name, pod in sets.items()}
    wrong = {name: got for name, got in wrong.items() if got != (True, "ClusterFirstWithHostNet")}
    assert wrong == {}


def test_without_hostnetwork_no_operand_is_in_the_host_network() -> None:
    sets = _daemonsets(_policy(set()))
    assert {name for name, pod in sets.items() if pod.get("hostNetwork") or "dnsPolicy" in pod} == set()


def test_hostnetwork_on_one_section_changes_only_its_operand() -> None:
    sets = _daemonsets(_policy({"devicePlugin"}))
    # The MPS control daemon is configured by the devicePlugin section, as upstream's is.
    assert {name for name, pod in sets.items() if pod.get("hostNetwork")} == {
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
    }
