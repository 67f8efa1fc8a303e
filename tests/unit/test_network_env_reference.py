"""The Network Operator's ``env`` (core/v1 EnvVar, ``valueFrom`` included, as upstream's CRDs embed it)
and the owners its reference pages (``docs/reference/nic*.md``, ``networks.md``) give each field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gpu_operator.api.crd import crds
from gpu_operator.api.fieldpaths import spec_fields
from gpu_operator.api.network.crd import network_crds
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.validation import validate_document
from gpu_operator.names import keys
from gpu_operator.names import network as net
from gpu_operator.render.network import NicFacts, NicNode, render_cluster_policy
from gpu_operator.render.reference import NCP_OWNERS, NETWORK_OWNERS, NNP_OWNERS, owner_of

OFED = {"image": "doca-driver", "repository": "nvcr.io/nvidia/mellanox", "version": "doca3.1.0-25.07-0.9.7.0-0"}
SECRET_ENV = {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "url"}}}


def _policy_doc(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": net.NCP_NAME},
            "spec": {"ofedDriver": {**OFED, "env": env}}}  # fmt: skip


def _node_policy_errors(env: list[dict[str, Any]]) -> list[str]:
    doc = {"apiVersion": net.API_VERSION, "kind": net.NNP_KIND, "metadata": {"name": "pool"},
           "spec": {"nodeSelector": {"pool": "a"}, "ofedDriver": {**OFED, "env": env}}}  # fmt: skip
    return [str(e) for e in validate_document(doc).errors]


def test_ofed_env_value_from_reaches_the_driver_container() -> None:
    policy = NicClusterPolicy.model_validate(_policy_doc([SECRET_ENV, {"name": "A", "value": "1"}]))
    labels = {net.NIC_PRESENT: "true", net.ARCH: "amd64", keys.OS_ID: "ubuntu", keys.OS_VERSION: "22.04",
              keys.KERNEL: "5.15.0-91-generic"}  # fmt: skip
    states = render_cluster_policy(policy, NicFacts(namespace="ns", nodes=(NicNode(name="n1", labels=labels),)))
    ofed = next(s for s in states if s.name == net.STATE_OFED)
    ds = next(o for o in ofed.objects if o["kind"] == "DaemonSet")
    env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "url"}}} in env
    assert {"name": "A", "value": "1"} in env


@pytest.mark.parametrize(
    ("value_from", "error"),
    [
        ({"configMapKeyRef": {"name": "cm", "key": "k", "optional": True}}, None),
        ({"fieldRef": {"fieldPath": "spec.nodeName"}}, None),
        ({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}, None),
        ({"secretKeyRef": {"key": "k"}}, None),
        ({}, "spec.ofedDriver.env[0].valueFrom: must set exactly one of"),
        ({"secretKeyRef": {"key": "k"}, "fieldRef": {"fieldPath": "x"}}, "spec.ofedDriver.env[0].valueFrom: must"),
        ({"fileKeyRef": {"key": "k", "path": "p", "volumeName": "v"}}, "spec.ofedDriver.env[0].valueFrom.fileKeyRef"),
        ({"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Q"}}, "spec.ofedDriver.env[0].valueFrom."),
        ({"secretKeyRef": {"name": "s"}}, "spec.ofedDriver.env[0].valueFrom.secretKeyRef.key"),
    ],
)
def test_env_value_from_rules(value_from: dict[str, Any], error: str | None) -> None:
    errors = _node_policy_errors([{"name": "X", "valueFrom": value_from}])
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1, errors
        assert errors[0].startswith(error)


def test_the_crds_check_one_source_and_the_gpu_env_is_unchanged() -> None:
    for file in ("mellanox.com_nicclusterpolicies.yaml", "mellanox.com_nicnodepolicies.yaml"):
        fields = spec_fields(network_crds()[file])
        assert fields["spec.ofedDriver.env[].valueFrom.secretKeyRef.name"].default == '""'
        assert fields["spec.ofedDriver.env[].valueFrom.resourceFieldRef.divisor"].type == "int-or-string"
    schema = network_crds()["mellanox.com_nicnodepolicies.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    value_from = schema["properties"]["spec"]["properties"]["ofedDriver"]["properties"]["env"]["items"]["properties"][
        "valueFrom"
    ]
    assert "== 1" in value_from["x-kubernetes-validations"][0]["rule"]
    # NVIDIA's GPU CRDs take name and value only; ours stay as they are.
    gpu = spec_fields(crds()["nvidia.com_clusterpolicies.yaml"])
    assert "spec.driver.env[].valueFrom" not in gpu


def _owners(file: str, owners: Mapping[str, str]) -> dict[str, str]:
    return {p: owner_of(p, owners=owners) for p in spec_fields(network_crds()[file]) if p != "spec"}


@pytest.mark.parametrize(
    ("file", "owners"),
    [
        ("mellanox.com_nicclusterpolicies.yaml", NCP_OWNERS),
        ("mellanox.com_nicnodepolicies.yaml", NNP_OWNERS),
        ("mellanox.com_macvlannetworks.yaml", NETWORK_OWNERS),
        ("mellanox.com_hostdevicenetworks.yaml", NETWORK_OWNERS),
        ("mellanox.com_ipoibnetworks.yaml", NETWORK_OWNERS),
    ],
)
def test_every_network_field_has_an_owner(file: str, owners: Mapping[str, str]) -> None:
    unowned = sorted(p for p, owner in _owners(file, owners).items() if not owner)
    assert not unowned, f"{file}: fields the reference page names no owner for: {unowned}"


def test_owners_name_the_states_and_controllers() -> None:
    ncp = _owners("mellanox.com_nicclusterpolicies.yaml", NCP_OWNERS)
    assert ncp["spec.ofedDriver.env[].valueFrom"] == net.STATE_OFED
    assert ncp["spec.secondaryNetwork.cniPlugins.image"] == net.STATE_CNI_PLUGINS
    assert "OFED upgrade controller" in ncp["spec.ofedDriver.upgradePolicy.drain.enable"]
    for path in ("nicConfigurationOperator", "nicConfigurationOperator.operator.image", "spectrumXOperator.image"):
        assert ncp[f"spec.{path}"].startswith("none: accepted"), path
        assert "SectionsNotDeployed" in ncp[f"spec.{path}"], path
    # Every state of the NicClusterPolicy owns at least one section.
    assert not [s for s in net.STATES if s not in set(NCP_OWNERS.values())]
    nnp = _owners("mellanox.com_nicnodepolicies.yaml", NNP_OWNERS)
    assert nnp["spec.rdmaSharedDevicePlugin.config"] == net.STATE_RDMA_DP
    assert nnp["spec.ofedDriver.upgradePolicy.maxParallelUpgrades"] == ncp["spec.ofedDriver.upgradePolicy"]
