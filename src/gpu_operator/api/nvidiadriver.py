"""``NVIDIADriver`` (``nvidia.com/v1alpha1``): a driver configuration for one pool of GPU nodes.

Routing rules that involve one object are declared here as :class:`Rule` (a default driver selects
no nodes itself; the owner label is reserved; driver type and precompiled mode are immutable);
rules across objects (at most one default, one driver per node) belong to the reconciler.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from gpu_operator.api.base import (
    ApiModel,
    Condition,
    EnvVar,
    FieldRule,
    ObjectMeta,
    ObjectName,
    PullPolicy,
    ResourceRequirements,
    Rule,
    Toleration,
    opt,
)
from gpu_operator.api.components import (
    IMPLEMENTATION_HELP,
    ConfigMapRef,
    DriverManager,
    DriverUpgradeStatus,
    Implementation,
    NVIDIADriverUpgradePolicy,
    Probe,
    Rdma,
)
from gpu_operator.api.corev1 import NodeAffinity, PodSecurityContext
from gpu_operator.api.k8srules import (
    Annotations,
    DNSSubdomain,
    ImageReference,
    ImageRepository,
    ImageVersion,
    Labels,
)
from gpu_operator.names import keys

OWNER_LABEL = keys.DRIVER_OWNER

_IMMUTABLE = FieldRule(rules=(Rule(cel="self == oldSelf", message="is immutable"),))


class SidecarImage(ApiModel):
    """A driver sidecar (GPUDirect Storage or GDRCopy) and its image."""

    enabled: bool | None = opt(description="Deploy the sidecar (default false).")
    repository: ImageRepository | None = opt(description="Registry and path.")
    image: ImageReference | None = opt(description="Image name.")
    version: ImageVersion | None = opt(description="Image tag or sha256 digest.")
    image_pull_policy: PullPolicy | None = opt(description="Pull policy.")
    image_pull_secrets: list[ObjectName] | None = opt(description="Pull secret names.")
    args: list[str] | None = opt(description="Extra arguments.")
    env: list[EnvVar] | None = opt(description="Extra environment variables.")


class NamedRef(ApiModel):
    """A reference to a ConfigMap or Secret by name."""

    name: ObjectName | None = opt(description="Name of the referenced object.")


class DriverLicensingConfig(ApiModel):
    """vGPU guest licensing of this driver."""

    secret_name: ObjectName | None = opt(description="Secret with gridd.conf and the NLS client token.")
    name: ObjectName | None = opt(description="Deprecated: ConfigMap with gridd.conf; use secretName.")
    nls_enabled: bool | None = opt(description="Use NVIDIA License System (default true).")


def _default_has_no_selector(spec: NVIDIADriverSpec) -> bool:
    return not (spec.default and spec.node_selector)


def _owner_label_reserved(spec: NVIDIADriverSpec) -> bool:
    return OWNER_LABEL not in (spec.node_selector or {})


def _precompiled_without_sidecars(spec: NVIDIADriverSpec) -> bool:
    if not spec.use_precompiled:
        return True
    return not any(s is not None and s.enabled for s in (spec.gds, spec.gdrcopy))


class NVIDIADriverSpec(ApiModel):
    """A driver configuration and the GPU nodes it applies to."""

    rules = (
        Rule(
            cel="!has(self.default) || !self.default || !has(self.nodeSelector) || size(self.nodeSelector) == 0",
            message="a default NVIDIADriver must not set nodeSelector (it applies to nodes no other driver selects)",
            check=_default_has_no_selector,
            field_path=".nodeSelector",
        ),
        Rule(
            cel=f"!has(self.nodeSelector) || !('{OWNER_LABEL}' in self.nodeSelector)",
            message=f"nodeSelector must not use the reserved label {OWNER_LABEL}",
            check=_owner_label_reserved,
            field_path=".nodeSelector",
        ),
        Rule(
            cel=(
                "!has(self.usePrecompiled) || !self.usePrecompiled"
                " || ((!has(self.gds) || !has(self.gds.enabled) || !self.gds.enabled)"
                " && (!has(self.gdrcopy) || !has(self.gdrcopy.enabled) || !self.gdrcopy.enabled))"
            ),
            message="precompiled drivers do not support gds or gdrcopy",
            check=_precompiled_without_sidecars,
            field_path=".usePrecompiled",
        ),
    )

    driver_type: Annotated[Literal["gpu", "vgpu", "vgpu-host-manager"], _IMMUTABLE] = Field(
        default="gpu", description="Driver flavour; immutable."
    )
    use_precompiled: Annotated[bool | None, _IMMUTABLE] = opt(
        description="Use precompiled driver images per kernel; immutable."
    )
    kernel_module_type: Literal["auto", "open", "proprietary"] = Field(
        default="auto", description="Kernel module flavour."
    )
    use_open_kernel_modules: bool | None = opt(description="Deprecated: use kernelModuleType.")
    default: bool = Field(default=False, description="Use for GPU nodes that no other NVIDIADriver selects.")
    startup_probe: Probe | None = opt(description="Startup probe of the driver container.")
    liveness_probe: Probe | None = opt(description="Liveness probe of the driver container.")
    readiness_probe: Probe | None = opt(description="Readiness probe of the driver container.")
    gds: SidecarImage | None = opt(description="GPUDirect Storage sidecar.")
    gdrcopy: SidecarImage | None = opt(description="GDRCopy sidecar.")
    rdma: Rdma | None = opt(description="GPUDirect RDMA.")
    repository: ImageRepository | None = opt(description="Registry and path of the driver image.")
    image: ImageReference = Field(default="nvcr.io/nvidia/driver", description="Driver image name or reference.")
    version: ImageVersion | None = opt(description="Driver version (image tag) or sha256 digest.")
    image_pull_policy: PullPolicy | None = opt(description="Pull policy.")
    image_pull_secrets: list[ObjectName] | None = opt(description="Pull secret names.")
    manager: DriverManager | None = opt(description="The driver manager init step.")
    implementation: Implementation | None = opt(description=IMPLEMENTATION_HELP)
    resources: ResourceRequirements | None = opt(description="Resources of the driver container.")
    args: list[str] | None = opt(description="Extra driver container arguments.")
    env: list[EnvVar] | None = opt(description="Extra driver container environment.")
    repo_config: NamedRef | None = opt(description="ConfigMap of package repositories.")
    cert_config: NamedRef | None = opt(description="ConfigMap of CA certificates.")
    licensing_config: DriverLicensingConfig | None = opt(description="vGPU licensing.")
    virtual_topology_config: NamedRef | None = opt(description="Virtual topology ConfigMap.")
    kernel_module_config: ConfigMapRef | None = opt(description="Kernel module parameters ConfigMap.")
    secret_env: ObjectName | None = opt(description="Secret exposed to the driver container as environment.")
    upgrade_policy: NVIDIADriverUpgradePolicy | None = opt(description="Rolling driver-upgrade policy.")
    node_selector: Labels | None = opt(description="Labels of the nodes this driver applies to.")
    node_affinity: NodeAffinity | None = opt(description="Node affinity of driver pods.")
    labels: Labels | None = opt(description="Labels of driver pods.")
    annotations: Annotations | None = opt(description="Annotations of driver pods.")
    tolerations: list[Toleration] | None = opt(description="Tolerations of driver pods.")
    priority_class_name: DNSSubdomain | None = opt(description="PriorityClass of driver pods.")
    pod_security_context: PodSecurityContext | None = opt(description="Pod security context of driver pods.")
    host_network: bool | None = opt(description="Run driver pods in the host network.")


class NVIDIADriverStatus(ApiModel):
    """The observed state of a driver configuration."""

    state: Literal["ignored", "ready", "notReady", "disabled"] | None = opt(description="Overall state.")
    namespace: str | None = opt(description="The operator namespace.")
    conditions: list[Condition] | None = opt(description="Ready and Error conditions.")
    driver_upgrade: DriverUpgradeStatus | None = opt(description="Progress of rolling driver upgrades.")


#: The name is the value of the driver label on its DaemonSets and pods, so a label value's limit applies.
MAX_NAME_LENGTH = 63


class NVIDIADriver(ApiModel):
    """A driver configuration for a pool of GPU nodes."""

    crd_plural: ClassVar[str] = "nvidiadrivers"
    rules = (
        Rule(
            # The API server has checked the DNS-subdomain shape already; size() is free of CEL cost.
            cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
            # No fieldPath: the CRD's schema declares no metadata fields for it to name.
            message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters"
            " (it is a label value on the driver's nodes, DaemonSets and pods)",
            check=lambda d: len(d.metadata.name) <= MAX_NAME_LENGTH,
        ),
    )

    api_version: Literal["nvidia.com/v1alpha1"] = Field(default="nvidia.com/v1alpha1", alias="apiVersion")
    kind: Literal["NVIDIADriver"] = "NVIDIADriver"
    metadata: ObjectMeta
    spec: NVIDIADriverSpec = Field(default_factory=NVIDIADriverSpec)
    status: NVIDIADriverStatus | None = None
