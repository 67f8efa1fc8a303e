"""The Network Operator's API models: defaults, the attribute names others code against, every rule's
Python check (passing and failing, with the field path it names) and image resolution with ``global``."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.network.imagespec import GlobalConfig, ImageSpec, image_of, pull_secrets_of, with_global
from gpu_operator.api.network.networks import HostDeviceNetworkSpec, qualified_resource_name
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.validation import to_manifest, validate_document

OFED = {"image": "doca-driver", "repository": "nvcr.io/nvidia/mellanox", "version": "doca3.5.0-26.07-0.7.0.0-0"}
RDMA = {"image": "k8s-rdma-shared-dev-plugin", "repository": "ghcr.io/mellanox", "version": "v1.5.3"}
IBK = {
    "image": "ib-kubernetes",
    "repository": "ghcr.io/mellanox",
    "version": "v1.1.1",
    "pKeyGUIDPoolRangeStart": "02:00:00:00:00:00:00:00",
    "pKeyGUIDPoolRangeEnd": "02:FF:FF:FF:FF:FF:FF:FF",
    "ufmSecret": "ufm",
}


def _doc(kind: str, spec: dict[str, Any], *, name: str = "obj") -> dict[str, Any]:
    return {"apiVersion": "mellanox.com/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _errors(kind: str, spec: dict[str, Any], *, name: str = "obj") -> list[str]:
    return [str(e) for e in validate_document(_doc(kind, spec, name=name)).errors]


def test_ofed_defaults_follow_upstream() -> None:
    spec = {"ofedDriver": {**OFED, "upgradePolicy": {"drain": {}, "waitForCompletion": {}}}}
    model = NicClusterPolicy.model_validate(_doc("NicClusterPolicy", spec))
    ofed = to_manifest(model, with_defaults=True)["spec"]["ofedDriver"]
    assert ofed["terminationGracePeriodSeconds"] == 300
    assert ofed["forcePrecompiled"] is False
    assert ofed["imagePullSecrets"] == []
    assert ofed["upgradePolicy"] == {
        "autoUpgrade": False,
        "maxParallelUpgrades": 1,
        "safeLoad": False,
        "waitForCompletion": {"timeoutSeconds": 0},
        "drain": {"enable": True, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
    }


def test_absent_sections_are_none_and_other_defaults() -> None:
    spec = {
        "ibKubernetes": IBK,
        "nicConfigurationOperator": {"operator": RDMA, "configurationDaemon": RDMA, "nicFirmwareStorage": {}},
    }
    model = NicClusterPolicy.model_validate(_doc("NicClusterPolicy", spec))
    assert model.spec.ofed_driver is None
    assert model.spec.secondary_network is None
    assert model.spec.global_ is None
    out = to_manifest(model, with_defaults=True)["spec"]
    assert out["ibKubernetes"]["periodicUpdateSeconds"] == 5
    assert out["nicConfigurationOperator"]["logLevel"] == "info"
    assert out["nicConfigurationOperator"]["nicFirmwareStorage"] == {
        "create": True,
        "pvcName": "nic-fw-storage-pvc",
        "availableStorageSize": "1Gi",
    }
    macvlan = validate_document(_doc("MacvlanNetwork", {})).model
    assert macvlan is not None
    assert to_manifest(macvlan, with_defaults=True)["spec"] == {"networkNamespace": "default"}


def test_attribute_names_the_renderer_and_upgrade_code_use() -> None:
    spec = {
        "global": {"repository": "r", "version": "v"},
        "ofedDriver": {**OFED, "upgradePolicy": {"drain": {"podSelector": "a=b"}}},
        "rdmaSharedDevicePlugin": {**RDMA, "config": RDMA_OK, "useCdi": True},
        "sriovDevicePlugin": {**RDMA, "image": "sriov-network-device-plugin"},
        "secondaryNetwork": {"multus": {"image": "multus-cni"}, "cniPlugins": {"image": "plugins"}},
        "nvIpam": {"image": "nvidia-k8s-ipam", "enableWebhook": True},
        "docaTelemetryService": {"image": "doca_telemetry", "config": {"fromConfigMap": "dts-config"}},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "deploymentTolerations": [{"key": "d", "operator": "Exists"}],
    }
    s = NicClusterPolicy.model_validate(_doc("NicClusterPolicy", spec)).spec
    assert s.global_ is not None
    assert s.global_.repository == "r"
    assert s.ofed_driver is not None
    assert s.ofed_driver.upgrade_policy is not None
    assert s.ofed_driver.upgrade_policy.max_parallel_upgrades == 1
    assert s.ofed_driver.upgrade_policy.drain is not None
    assert s.ofed_driver.upgrade_policy.drain.pod_selector == "a=b"
    assert s.rdma_shared_device_plugin is not None
    assert s.rdma_shared_device_plugin.use_cdi is True
    assert s.sriov_device_plugin is not None
    assert s.sriov_device_plugin.config is None
    assert s.secondary_network is not None
    assert s.secondary_network.cni_plugins is not None
    assert s.secondary_network.ipoib is None
    assert s.nv_ipam is not None
    assert s.nv_ipam.enable_webhook is True
    assert s.doca_telemetry_service is not None
    assert s.doca_telemetry_service.config is not None
    assert s.deployment_tolerations is not None
    assert s.tolerations is not None


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        # Image sources: own, global, full reference, absent section -> fine; none -> the field is named.
        ({"ofedDriver": OFED}, None),
        ({"global": {"repository": "g", "version": "v1"}, "secondaryNetwork": {"multus": {"image": "m"}}}, None),
        ({"secondaryNetwork": {"ipoib": {"image": "ghcr.io/mellanox/ipoib-cni:v1.2.2"}}}, None),
        ({"nvIpam": {"image": "ghcr.io/mellanox/nvidia-k8s-ipam@sha256:" + "a" * 64}}, None),
        ({"global": {"version": "v1"}, "nvIpam": {"image": "nvidia-k8s-ipam"}}, "spec.nvIpam.repository"),
        ({"global": {"repository": "g"}, "secondaryNetwork": {"cniPlugins": {"image": "p"}}},
         "spec.secondaryNetwork.cniPlugins.version"),
        ({"nicConfigurationOperator": {"operator": RDMA, "configurationDaemon": {"image": "d", "version": "1"}}},
         "spec.nicConfigurationOperator.configurationDaemon.repository"),
        ({"spectrumXOperator": {**RDMA, "xPlane": {"image": "x", "repository": "r"}}},
         "spec.spectrumXOperator.xPlane.version"),
        # safeLoad needs autoUpgrade.
        ({"ofedDriver": {**OFED, "upgradePolicy": {"autoUpgrade": True, "safeLoad": True}}}, None),
        ({"ofedDriver": {**OFED, "upgradePolicy": {"safeLoad": True}}}, "spec.ofedDriver.upgradePolicy.safeLoad"),
        ({"ofedDriver": {**OFED, "version": "24.10-0.7.0.0-0"}}, None),
        ({"ofedDriver": {**OFED, "version": "v24"}}, "spec.ofedDriver.version"),
        ({"ofedDriver": {**OFED, "upgradePolicy": {"maxParallelUpgrades": -1}}},
         "spec.ofedDriver.upgradePolicy.maxParallelUpgrades"),
        # The GUID pool range is ordered (case does not matter).
        ({"ibKubernetes": {**IBK, "pKeyGUIDPoolRangeEnd": "02:00:00:00:00:00:00:ff"}}, None),
        ({"ibKubernetes": {**IBK, "pKeyGUIDPoolRangeEnd": "01:FF:FF:FF:FF:FF:FF:FF"}},
         "spec.ibKubernetes.pKeyGUIDPoolRangeEnd"),
        ({"ibKubernetes": {**IBK, "pKeyGUIDPoolRangeStart": "02:00"}}, "spec.ibKubernetes.pKeyGUIDPoolRangeStart"),
        # JSON inside strings.
        ({"secondaryNetwork": {"multus": {**RDMA, "config": '{"cniVersion": "1.0.0"}'}}}, None),
        ({"secondaryNetwork": {"multus": {**RDMA, "config": "[1]"}}}, "spec.secondaryNetwork.multus.config"),
        ({"docaTelemetryService": {**RDMA, "config": {"fromConfigMap": "Bad_Name"}}},
         "spec.docaTelemetryService.config.fromConfigMap"),
    ],
)  # fmt: skip
def test_cluster_policy_rules(spec: dict[str, Any], error: str | None) -> None:
    paths = [e.split(": ", 1)[0] for e in _errors("NicClusterPolicy", spec)]
    assert paths == ([] if error is None else [error])


RDMA_OK = (
    '{"configList": [{"resourceName": "rdma_a", "resourcePrefix": "nvidia.com", "selectors": {"vendors": ["15b3"]}}]}'
)
SRIOV_OK = '{"resourceList": [{"resourceName": "hostdev_v1", "resourcePrefix": "nvidia.com", "selectors": {}}]}'
DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("section", "config", "message"),
    [
        ("rdmaSharedDevicePlugin", RDMA_OK, None),
        ("rdmaSharedDevicePlugin", "", "required: the plugin serves the resources of configList"),
        ("rdmaSharedDevicePlugin", "{not json", "not valid JSON"),
        ("rdmaSharedDevicePlugin", '{"configList": []}', "configList: expected a non-empty list of resources"),
        ("rdmaSharedDevicePlugin", '{"configList": [{"resourceName": "rdma-a", "selectors": {"vendors": ["15b3"]}}]}',
         "configList[0].resourceName"),
        ("rdmaSharedDevicePlugin", '{"configList": [{"resourceName": "a", "devices": ["x"]}, '
         '{"resourceName": "a", "devices": ["y"]}]}', "configList[1].resourceName: 'a' is already used"),
        ("rdmaSharedDevicePlugin", '{"configList": [{"resourceName": "a", "selectors": {}}]}',
         'neither "selectors" nor the deprecated "devices" is set'),
        ("rdmaSharedDevicePlugin", '{"configList": [{"resourceName": "a", "rdmaHcaMax": 1000000, "devices": ["x"]}]}',
         "configList[0].rdmaHcaMax: at most 10000"),
        ("rdmaSharedDevicePlugin", DEEP, "nested more than 32 levels deep"),
        ("rdmaSharedDevicePlugin", '{"configList": ["a"]}', "configList[0]"),
        ("sriovDevicePlugin", SRIOV_OK, None),
        ("sriovDevicePlugin", "", None),
        ("sriovDevicePlugin", '{"resourceList": [{"resourceName": "hostdev.v1"}]}', "resourceList[0].resourceName"),
        ("sriovDevicePlugin", '{"resourceList": [{"resourceName": "-bad"}]}', "resourceList[0].resourceName"),
        ("sriovDevicePlugin", '{"resourceList": [{"resourceName": "ok", "resourcePrefix": 1}]}', "resourcePrefix"),
        ("sriovDevicePlugin", '{"resourceList": [7]}', "resourceList[0]"),
        ("sriovDevicePlugin", "[]", "the config must be a JSON object with a resourceList"),
    ],
)  # fmt: skip
def test_device_plugin_config_is_checked_offline(section: str, config: str, message: str | None) -> None:
    """Offline and in status, the embedded config goes through the node plugin's own parser."""
    for kind, extra in (("NicClusterPolicy", {}), ("NicNodePolicy", {"nodeSelector": {"pool": "a"}})):
        errors = _errors(kind, {**extra, section: {**RDMA, "config": config}})
        if message is None:
            assert errors == []
        else:
            assert len(errors) == 1, errors
            assert errors[0].startswith(f"spec.{section}.config: ")
            assert message in errors[0]


@pytest.mark.parametrize(
    ("spec", "name", "error"),
    [
        ({"nodeSelector": {"pool": "a"}, "ofedDriver": OFED}, "pool-a", None),
        ({"nodeSelector": {}}, "pool-a", "spec.nodeSelector: must select nodes"),
        ({"ofedDriver": OFED}, "pool-a", "spec.nodeSelector: required field is missing"),
        ({"nodeSelector": {"pool": "a"}, "ofedDriver": {"image": "doca-driver", "version": OFED["version"]}},
         "pool-a", "spec.ofedDriver.repository: the image needs a repository: set it here"),
        ({"nodeSelector": {"pool": "a"}}, "p" * 31, "metadata.name must be at most 30 characters"),
        ({"nodeSelector": {"pool": "a"}}, "p" * 30, None),
    ],
)  # fmt: skip
def test_node_policy_rules(spec: dict[str, Any], name: str, error: str | None) -> None:
    errors = _errors("NicNodePolicy", spec, name=name)
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1, errors
        assert errors[0].startswith(error)


def test_node_policy_needs_a_spec() -> None:
    doc = _doc("NicNodePolicy", {})
    del doc["spec"]
    assert [str(e) for e in validate_document(doc).errors] == ["spec: required field is missing"]


@pytest.mark.parametrize(
    ("kind", "spec", "error"),
    [
        ("MacvlanNetwork", {"mode": "passthru", "mtu": 9000, "ipam": '{"type": "nv-ipam"}'}, None),
        ("MacvlanNetwork", {"mode": "vlan"}, "spec.mode"),
        ("MacvlanNetwork", {"mtu": -1}, "spec.mtu"),
        ("MacvlanNetwork", {"metaPlugins": '{"type": "tuning"}, {"type": "sbr"}'}, None),
        ("MacvlanNetwork", {"metaPlugins": '[{"type": "tuning"}]'}, "spec.metaPlugins"),
        ("MacvlanNetwork", {"metaPlugins": '{"mtu": 1500}'}, "spec.metaPlugins"),
        ("MacvlanNetwork", {"networkNamespace": ""}, "spec.networkNamespace"),
        ("HostDeviceNetwork", {"resourceName": "nvidia.com/hostdev", "ipam": "{}"}, None),
        ("HostDeviceNetwork", {"resourceName": "hostdev", "ipam": "nope"}, "spec.ipam"),
        ("HostDeviceNetwork", {"resourceName": "other.io/hostdev"}, "spec.resourceName"),
        ("HostDeviceNetwork", {}, "spec.resourceName"),
        ("IPoIBNetwork", {"master": "ibs3f1", "ipam": '{"type": "whereabouts"}'}, None),
        ("IPoIBNetwork", {"ipam": '"type"'}, "spec.ipam"),
        ("IPoIBNetwork", {"metaPlugins": "{}"}, "spec.metaPlugins"),  # IPoIB has no metaPlugins
    ],
)
def test_network_rules(kind: str, spec: dict[str, Any], error: str | None) -> None:
    paths = [e.split(": ", 1)[0] for e in _errors(kind, spec)]
    assert paths == ([] if error is None else [error])


def test_host_device_resource_name_gets_upstream_prefix() -> None:
    assert qualified_resource_name(HostDeviceNetworkSpec.model_validate({"resourceName": "hostdev"})) == (
        "nvidia.com/hostdev"
    )
    assert qualified_resource_name(HostDeviceNetworkSpec.model_validate({"resourceName": "nvidia.com/vf"})) == (
        "nvidia.com/vf"
    )


def test_image_of_resolves_with_global() -> None:
    g = GlobalConfig.model_validate({"repository": "nvcr.io/nvidia/mellanox/", "version": "v26.7.0",
                                     "imagePullSecrets": ["ngc"]})  # fmt: skip
    own = ImageSpec.model_validate({"image": "multus-cni", "repository": "ghcr.io/k8snetworkplumbingwg",
                                    "version": "v4.3.0", "imagePullSecrets": ["mine"]})  # fmt: skip
    bare = ImageSpec.model_validate({"image": "plugins"})
    assert image_of(own, g) == "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0"
    assert image_of(own) == "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0"
    assert image_of(bare, g) == "nvcr.io/nvidia/mellanox/plugins:v26.7.0"
    half = ImageSpec.model_validate({"image": "plugins", "version": "v1"})
    assert image_of(half, g) == "nvcr.io/nvidia/mellanox/plugins:v1"
    digest = ImageSpec.model_validate({"image": "plugins", "repository": "r", "version": "sha256:" + "b" * 64})
    assert image_of(digest) == "r/plugins@sha256:" + "b" * 64
    assert image_of(ImageSpec.model_validate({"image": "quay.io/x/y:1"}), g) == "quay.io/x/y:1"
    with pytest.raises(ValueError, match="'plugins' has no repository and version"):
        image_of(bare, None)
    with pytest.raises(ValueError, match="has no version"):
        image_of(bare, GlobalConfig.model_validate({"repository": "r"}))
    assert pull_secrets_of(own, g) == ["mine"]
    assert pull_secrets_of(bare, g) == ["ngc"]
    assert pull_secrets_of(bare, None) == []
    filled = with_global(bare, g)
    assert (filled.repository, filled.version, filled.image_pull_secrets) == (
        "nvcr.io/nvidia/mellanox/",
        "v26.7.0",
        ["ngc"],
    )
    assert with_global(own, None) is own
