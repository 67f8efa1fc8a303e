"""``NicClusterPolicy`` (``mellanox.com/v1alpha1``, cluster-scoped, short name ``ncp``).

The cluster-wide Network Operator policy, field-compatible with Mellanox/network-operator: one
optional section per component (absent = not deployed, its objects pruned), ``global`` image defaults
and placement for DaemonSets and Deployments. Only the policy named ``nic-cluster-policy``
(:data:`gpu_operator.names.network.NCP_NAME`) is acted on; others get state ``ignore``.
Rules one object can answer are declared here (every image resolvable, the GUID range ordered);
rules across objects (a NicNodePolicy section also set here) belong to the reconciler.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, FieldRule, ObjectMeta, ObjectName, Rule, Toleration, opt, section
from gpu_operator.api.corev1 import CoreEnvVar, NodeAffinity
from gpu_operator.api.k8srules import DNSSubdomain, Int32
from gpu_operator.api.network.components import (
    CONFIG_JSON_RULE,
    AppliedState,
    ConfigMapNameReference,
    DevicePluginSpec,
    DrainSpec,
    DriverUpgradePolicySpec,
    OFEDDriverSpec,
    PodProbeSpec,
    PolicyStatus,
    RdmaSharedDevicePluginSpec,
    SriovDevicePluginSpec,
    WaitForCompletionSpec,
)
from gpu_operator.api.network.imagespec import GlobalConfig, ImageSpec, image_source_rules

GUID_PATTERN = r"^([0-9A-Fa-f]{2}:){7}[0-9A-Fa-f]{2}$"
_IMMUTABLE = FieldRule(rules=(Rule(cel="self == oldSelf", message="is immutable; delete nicFirmwareStorage first"),))


def _guid(value: str) -> str:
    return value.replace(":", "").lower()


class IBKubernetesSpec(ImageSpec):
    """ib-kubernetes: assigns InfiniBand GUIDs to pods' PKeys through UFM."""

    rules = (
        Rule(
            # Same-length hex strings order like the numbers they spell.
            cel="self.pKeyGUIDPoolRangeEnd.lowerAscii().replace(':', '')"
            " > self.pKeyGUIDPoolRangeStart.lowerAscii().replace(':', '')",
            message="pKeyGUIDPoolRangeEnd must be greater than pKeyGUIDPoolRangeStart",
            check=lambda s: _guid(s.p_key_guid_pool_range_end) > _guid(s.p_key_guid_pool_range_start),
            field_path=".pKeyGUIDPoolRangeEnd",
        ),
    )

    periodic_update_seconds: Int32 = Field(default=5, ge=0, description="Seconds between updates.")
    p_key_guid_pool_range_start: str = Field(
        alias="pKeyGUIDPoolRangeStart",
        pattern=GUID_PATTERN,
        max_length=23,
        description="First GUID of the pool (xx:..:xx).",
    )
    p_key_guid_pool_range_end: str = Field(
        alias="pKeyGUIDPoolRangeEnd",
        pattern=GUID_PATTERN,
        max_length=23,
        description="Last GUID of the pool (xx:..:xx).",
    )
    ufm_secret: ObjectName = Field(description="Secret with the credentials of the UFM service.")


class MultusSpec(ImageSpec):
    """Multus CNI; without ``config`` its configuration is generated from the primary network's."""

    rules = (CONFIG_JSON_RULE,)

    config: str | None = opt(description="Multus configuration as a JSON string.")


class SecondaryNetworkSpec(ApiModel):
    """Components for secondary pod networks."""

    multus: MultusSpec | None = opt(description="Multus, the meta CNI plugin that attaches extra networks.")
    cni_plugins: ImageSpec | None = opt(description="The containernetworking plugins (macvlan, host-device, ...).")
    ipoib: ImageSpec | None = opt(description="The IPoIB CNI plugin.")


class NVIPAMSpec(ImageSpec):
    """nv-ipam, NVIDIA's IP address manager for secondary networks."""

    enable_webhook: bool | None = opt(description="Deploy its validating webhook (needs cert-manager).")


class NICFeatureDiscoverySpec(ImageSpec):
    """nic-feature-discovery: node labels describing the NICs (works with NFD)."""


class DOCATelemetryServiceConfig(ApiModel):
    """Where the DOCA Telemetry Service reads its configuration."""

    from_config_map: DNSSubdomain | None = opt(description="ConfigMap in the operator namespace; replaces the default.")


class DOCATelemetryServiceSpec(ImageSpec):
    """The DOCA Telemetry Service: NIC telemetry for Prometheus."""

    config: DOCATelemetryServiceConfig | None = opt(description="Custom configuration.")


class NicFirmwareStorageSpec(ApiModel):
    """Storage for NIC firmware binaries of the NIC Configuration Operator."""

    create: bool = Field(default=True, description="Create the PVC (false: use an existing one).")
    pvc_name: str = Field(
        default="nic-fw-storage-pvc", min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Name of the PVC.",
    )  # fmt: skip
    storage_class_name: Annotated[str | None, _IMMUTABLE] = opt(description="Storage class; default: cluster's.")
    available_storage_size: Annotated[str, _IMMUTABLE] = Field(
        default="1Gi", pattern=r"^(\d+)(Ei|Pi|Ti|Gi|Mi|Ki)$", description="Size requested when created."
    )


class NicConfigurationOperatorSpec(ApiModel):
    """The NIC Configuration Operator (accepted for compatibility; this operator deploys no state for it)."""

    operator: ImageSpec = Field(description="Image of the operator.")
    configuration_daemon: ImageSpec = Field(description="Image of the configuration daemon.")
    env: list[CoreEnvVar] | None = opt(description="Environment of the operator and daemon containers.")
    nic_firmware_storage: NicFirmwareStorageSpec | None = opt(description="Firmware storage; absent: none.")
    log_level: Literal["info", "debug"] = Field(default="info", description="Log verbosity.")


class SpectrumXOperatorSpec(ImageSpec):
    """The Spectrum-X Operator (accepted for compatibility; this operator deploys no state for it)."""

    x_plane: ImageSpec | None = opt(description="Image of the X-plane component.")


#: Every image-bearing section, as dotted JSON paths under spec.
IMAGE_SECTIONS = (
    "ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin", "ibKubernetes", "secondaryNetwork.multus",
    "secondaryNetwork.cniPlugins", "secondaryNetwork.ipoib", "nvIpam", "nicFeatureDiscovery",
    "docaTelemetryService", "nicConfigurationOperator.operator", "nicConfigurationOperator.configurationDaemon",
    "spectrumXOperator", "spectrumXOperator.xPlane",
)  # fmt: skip


class NicClusterPolicySpec(ApiModel):
    """The NIC components to deploy on the cluster's nodes, and where."""

    rules = image_source_rules(IMAGE_SECTIONS, global_field="global")

    global_: GlobalConfig | None = opt(alias="global", description="Image defaults of every component.")
    ofed_driver: OFEDDriverSpec | None = opt(description="The DOCA-OFED driver container.")
    rdma_shared_device_plugin: RdmaSharedDevicePluginSpec | None = opt(description="The RDMA shared device plugin.")
    sriov_device_plugin: SriovDevicePluginSpec | None = opt(description="The SR-IOV network device plugin.")
    ib_kubernetes: IBKubernetesSpec | None = opt(description="ib-kubernetes (InfiniBand PKey GUIDs).")
    secondary_network: SecondaryNetworkSpec | None = opt(description="Multus, CNI plugins and IPoIB CNI.")
    nv_ipam: NVIPAMSpec | None = opt(description="nv-ipam.")
    nic_feature_discovery: NICFeatureDiscoverySpec | None = opt(description="NIC feature discovery.")
    doca_telemetry_service: DOCATelemetryServiceSpec | None = opt(description="DOCA Telemetry Service.")
    nic_configuration_operator: NicConfigurationOperatorSpec | None = opt(
        description="NIC Configuration Operator (not deployed by this operator)."
    )
    spectrum_x_operator: SpectrumXOperatorSpec | None = opt(
        alias="spectrumXOperator", description="Spectrum-X Operator (not deployed by this operator)."
    )
    node_affinity: NodeAffinity | None = opt(description="Node affinity added to every DaemonSet.")
    tolerations: list[Toleration] | None = opt(description="Tolerations added to every DaemonSet.")
    deployment_node_affinity: NodeAffinity | None = opt(description="Node affinity added to every Deployment.")
    deployment_tolerations: list[Toleration] | None = opt(description="Tolerations added to every Deployment.")


class NicClusterPolicyStatus(PolicyStatus):
    """The observed state of the NicClusterPolicy."""


class NicClusterPolicy(ApiModel):
    """The cluster-wide NIC policy (only the one named nic-cluster-policy is acted on)."""

    crd_plural: ClassVar[str] = "nicclusterpolicies"

    api_version: Literal["mellanox.com/v1alpha1"] = Field(default="mellanox.com/v1alpha1", alias="apiVersion")
    kind: Literal["NicClusterPolicy"] = "NicClusterPolicy"
    metadata: ObjectMeta
    spec: NicClusterPolicySpec = section(NicClusterPolicySpec)
    status: NicClusterPolicyStatus | None = None


__all__ = [
    "AppliedState",
    "ConfigMapNameReference",
    "DOCATelemetryServiceSpec",
    "DevicePluginSpec",
    "DrainSpec",
    "DriverUpgradePolicySpec",
    "GlobalConfig",
    "IBKubernetesSpec",
    "ImageSpec",
    "MultusSpec",
    "NICFeatureDiscoverySpec",
    "NVIPAMSpec",
    "NicClusterPolicy",
    "NicClusterPolicySpec",
    "NicClusterPolicyStatus",
    "OFEDDriverSpec",
    "PodProbeSpec",
    "RdmaSharedDevicePluginSpec",
    "SecondaryNetworkSpec",
    "SriovDevicePluginSpec",
    "WaitForCompletionSpec",
]
