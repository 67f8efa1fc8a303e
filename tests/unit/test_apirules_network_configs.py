"""One parser per input: a NicClusterPolicy's embedded plugin configs are checked offline (and in the
operator's status) by the very parser the plugin runs on the node, and network interface names as the
kernel takes them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_operator.agents.rdmadp.config import RdmaConfigError
from gpu_operator.agents.rdmadp.config import parse_config as node_rdma
from gpu_operator.agents.sriovdp.config import ConfigError as SriovConfigError
from gpu_operator.agents.sriovdp.config import parse_config as node_sriov
from gpu_operator.api.validation import validate_document

IMAGE = {"image": "plugin", "repository": "ghcr.io/mellanox", "version": "v1.5.3"}

RDMA_CONFIGS = [
    {"configList": [{"resourceName": "rdma_a", "selectors": {"vendors": ["15b3"]}}]},
    {"configList": [{"resourceName": "rdma_a", "devices": ["ib0"]}]},
    {"configList": []},
    {"configList": [{"resourceName": "rdma_a", "selectors": {}}]},
    {"configList": [{"resourceName": "rdma_a", "rdmaHcaMax": 10001, "selectors": {"vendors": ["15b3"]}}]},
    {"configList": [{"resourceName": "rdma_a", "rdmaHcaMax": -1, "selectors": {"vendors": ["15b3"]}}]},
    {"periodicUpdateInterval": 86401, "configList": [{"resourceName": "a", "devices": ["ib0"]}]},
    {"configList": [{"resourceName": "a b", "devices": ["ib0"]}]},
    {"configList": [{"resourceName": "a", "devices": ["ib0"]}, {"resourceName": "a", "devices": ["ib1"]}]},
]
SRIOV_CONFIGS = [
    {"resourceList": []},
    {"resourceList": [{"resourceName": "hostdev", "selectors": {"vendors": ["15b3"]}}]},
    {"resourceList": [{"resourceName": "host.dev", "selectors": {"vendors": ["15b3"]}}]},
    {"resourceList": [{"resourceName": "hostdev", "selectors": {"pfNames": ["ens1f0#0-99999"]}}]},
    {"resourceList": [{"resourceName": "hostdev", "selectors": {"vendors": "15b3"}}]},
    {"resourceList": [{"resourceName": "hostdev"}], "extra": 1},
]


def _errors(section: str, config: str) -> list[str]:
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {section: {**IMAGE, "config": config}},
    }
    return [str(e) for e in validate_document(doc).errors]


def _node_refuses(parse: Any, error: type[Exception], text: str) -> str | None:
    try:
        parse(text, source="config")
    except error as exc:
        return str(exc).removeprefix("config: ")
    return None


@pytest.mark.parametrize("config", RDMA_CONFIGS, ids=range(len(RDMA_CONFIGS)))
def test_an_rdma_config_validates_exactly_when_the_node_plugin_takes_it(config: dict[str, Any]) -> None:
    text = json.dumps(config)
    refused = _node_refuses(node_rdma, RdmaConfigError, text)
    assert _errors("rdmaSharedDevicePlugin", text) == (
        [] if refused is None else [f"spec.rdmaSharedDevicePlugin.config: {refused}"]
    )


@pytest.mark.parametrize("config", SRIOV_CONFIGS, ids=range(len(SRIOV_CONFIGS)))
def test_an_sriov_config_validates_exactly_when_the_node_plugin_takes_it(config: dict[str, Any]) -> None:
    text = json.dumps(config)
    refused = _node_refuses(node_sriov, SriovConfigError, text)
    assert _errors("sriovDevicePlugin", text) == (
        [] if refused is None else [f"spec.sriovDevicePlugin.config: {refused}"]
    )


def test_both_outcomes_are_covered() -> None:
    outcomes = {_node_refuses(node_rdma, RdmaConfigError, json.dumps(c)) is None for c in RDMA_CONFIGS}
    outcomes |= {_node_refuses(node_sriov, SriovConfigError, json.dumps(c)) is None for c in SRIOV_CONFIGS}
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    ("master", "ok"),
    [("ib0", True), ("ens1f0np0", True), ("a" * 15, True), (".x", True), ("ib0\n", False), ("a" * 16, False),
     (".", False), ("..", False), ("a/b", False), ("a:1", False), ("a b", False), ("", False)],
)  # fmt: skip
def test_a_master_interface_is_a_name_the_kernel_takes(master: str, ok: bool) -> None:
    doc = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "IPoIBNetwork",
        "metadata": {"name": "i"},
        "spec": {"master": master},
    }
    errors = [str(e) for e in validate_document(doc).errors]
    assert errors == [] if ok else errors and errors[0].startswith("spec.master: ")
