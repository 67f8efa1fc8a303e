"""``ClusterPolicy`` (``nvidia.com/v1``): the cluster-wide GPU policy, field-compatible with NVIDIA's.

Sections whose nested fields have server-side defaults default to ``{}`` (so an empty spec and a
spec naming the section get the same defaults); optional sections whose presence means something
(``gds``, ``gdrcopy``, ``driver.upgradePolicy``) stay absent. ``enabled`` flags are left unset and
read through :mod:`gpu_operator.api.defaults`, which holds the "absent means ..." semantics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from gpu_operator.api.base import (
    ApiModel,
    Condition,
    EnvVar,
    HostPath,
    HostPathOrUnset,
    HostRoot,
    ObjectMeta,
    ObjectName,
    Rule,
    TaintKey,
    Toleration,
    opt,
    section,
)
from gpu_operator.api.components import (
    ClusterPolicyUpgradePolicy,
    Component,
    ConfigMapRef,
    DriverManager,
    DriverUpgradeStatus,
    ImageRef,
    NamedConfig,
    PodComponent,
    Probe,
    Rdma,
    SidecarComponent,
)
from gpu_operator.api.corev1 import PodSecurityContext
from gpu_operator.api.k8srules import Annotations, DNSSubdomain, Labels
from gpu_operator.api.remediation import RemediationSpec, RemediationStatus
from gpu_operator.api.sandbox import (
    CCManagerSpec,
    KataManagerSpec,
    SandboxDevicePluginSpec,
    SandboxWorkloadsSpec,
    VFIOManagerSpec,
    VGPUDeviceManagerSpec,
    VGPUManagerSpec,
)
from gpu_operator.api.telemetry import (
    DCGMExporterSpec,
    DCGMSpec,
    NodeStatusExporterSpec,
    ServiceMonitorSpec,
)
from gpu_operator.api.windows import Schedule, TimeZone, WindowLength, WindowSchedule
from gpu_operator.names import keys

GROUP = "nvidia.com"
VERSION = "v1"
KIND = "ClusterPolicy"


class OperatorMetrics(ApiModel):
    """Operator metrics settings."""

    service_monitor: ServiceMonitorSpec | None = opt(
        description="A ServiceMonitor for the operator's metrics (created by default when the CRD is served)."
    )


class OperatorSpec(ApiModel):
    """Settings of the operator itself."""

    default_runtime: Literal["docker", "crio", "containerd"] | None = opt(
        description="Deprecated: the container runtime is detected from the nodes."
    )
    runtime_class: DNSSubdomain = Field(default="nvidia", description="Name of the RuntimeClass operands run with.")
    init_container: ImageRef | None = opt(description="Deprecated init container image.")
    labels: Labels | None = opt(description="Labels added to objects the operator creates.")
    annotations: Annotations | None = opt(description="Annotations added to objects the operator creates.")
    metrics: OperatorMetrics | None = opt(description="Operator metrics settings.")
    use_ocp_driver_toolkit: bool | None = opt(
        alias="use_ocp_driver_toolkit", description="Build drivers with the OpenShift Driver Toolkit."
    )


class RollingUpdate(ApiModel):
    """Rolling-update settings of operand DaemonSets."""

    max_unavailable: str | None = opt(
        description='Pods unavailable at once during an update: a count ("1") or a percentage ("25%").',
        pattern=r"^([0-9]+|(100|[1-9]?[0-9])%)$",
    )


class DaemonsetsSpec(ApiModel):
    """Settings applied to every operand DaemonSet."""

    labels: Labels | None = opt(description="Labels added to operand pods (app labels are kept).")
    annotations: Annotations | None = opt(description="Annotations added to operand pods.")
    tolerations: list[Toleration] | None = opt(description="Tolerations that replace the operands' own.")
    priority_class_name: DNSSubdomain | None = opt(description="PriorityClass of operand pods.")
    update_strategy: Literal["RollingUpdate", "OnDelete"] = Field(
        default="RollingUpdate",
        description="Update strategy of operand DaemonSets (the driver's is OnDelete).",
    )
    rolling_update: RollingUpdate | None = opt(description="Rolling-update settings.")
    pod_security_context: PodSecurityContext | None = opt(description="Pod security context of operand pods.")


class RepoConfig(ApiModel):
    """OS package repositories for building the driver."""

    config_map_name: ObjectName | None = opt(description="ConfigMap whose keys are repository files.")


class CertConfig(ApiModel):
    """Custom CA certificates for package downloads."""

    name: ObjectName | None = opt(description="ConfigMap holding the certificates.")


class LicensingConfig(ApiModel):
    """vGPU guest licensing."""

    config_map_name: ObjectName | None = opt(description="Deprecated: ConfigMap with gridd.conf; use secretName.")
    secret_name: ObjectName | None = opt(description="Secret with gridd.conf and the NLS client token.")
    nls_enabled: bool | None = opt(description="Use NVIDIA License System (default false in v1).")


class VirtualTopology(ApiModel):
    """Virtual topology daemon configuration."""

    config: ObjectName | None = opt(description="ConfigMap with the topology file.")


class DriverSpec(Component):
    """The NVIDIA driver operand."""

    use_nvidia_driver_crd: bool | None = opt(
        alias="useNvidiaDriverCRD", description="Manage drivers with NVIDIADriver resources instead."
    )
    use_precompiled: bool | None = opt(description="Use precompiled driver images per kernel.")
    use_open_kernel_modules: bool | None = opt(description="Deprecated: use kernelModuleType.")
    kernel_module_type: Literal["auto", "open", "proprietary"] = Field(
        default="auto", description="Kernel module flavour; auto picks by driver branch and GPU."
    )
    startup_probe: Probe | None = opt(description="Startup probe of the driver container.")
    liveness_probe: Probe | None = opt(description="Liveness probe of the driver container.")
    readiness_probe: Probe | None = opt(description="Readiness probe of the driver container.")
    rdma: Rdma | None = opt(description="GPUDirect RDMA settings.")
    upgrade_policy: ClusterPolicyUpgradePolicy | None = opt(description="Rolling driver-upgrade policy.")
    manager: DriverManager | None = opt(description="The driver manager init step.")
    repo_config: RepoConfig | None = opt(description="Package repositories for the driver build.")
    cert_config: CertConfig | None = opt(description="CA certificates for package downloads.")
    licensing_config: LicensingConfig | None = opt(description="vGPU licensing.")
    virtual_topology: VirtualTopology | None = opt(description="Virtual topology configuration.")
    kernel_module_config: ConfigMapRef | None = opt(description="ConfigMap of kernel module parameters.")
    secret_env: ObjectName | None = opt(description="Secret exposed to the driver container as environment.")


class ToolkitSpec(Component):
    """The container toolkit operand (runtime configuration and CDI)."""

    install_dir: HostPath = Field(default="/usr/local/nvidia", description="Host directory the toolkit installs to.")


class MpsSpec(ApiModel):
    """MPS sharing settings of the device plugin."""

    root: HostPath = Field(default="/run/nvidia/mps", description="Host directory of the MPS control daemon.")


class DevicePluginSpec(Component):
    """The kubelet device plugin operand."""

    config: NamedConfig | None = opt(description="ConfigMap of named plugin configurations.")
    mps: MpsSpec = section(MpsSpec, description="MPS settings.")


class GPUFeatureDiscoverySpec(Component):
    """The GPU feature discovery operand."""


class MIGSpec(ApiModel):
    """How MIG devices are exposed."""

    strategy: Literal["none", "single", "mixed"] | None = opt(description="MIG strategy: none, single or mixed.")


class MIGManagerConfig(ApiModel):
    """MIG partitioning configurations."""

    name: ObjectName | None = opt(description="ConfigMap with config.yaml (mig-parted format).")
    default: Literal["all-disabled", ""] = Field(
        default="all-disabled", description="Configuration applied to nodes that ask for none."
    )


class MIGManagerSpec(Component):
    """The MIG manager operand."""

    config: MIGManagerConfig | None = opt(description="MIG configurations.")
    gpu_clients_config: ConfigMapRef | None = opt(description="ConfigMap with clients.yaml.")


class EnvOnly(ApiModel):
    """Environment of one validator component."""

    env: list[EnvVar] | None = opt(description="Environment variables.")


class ValidatorSpec(PodComponent):
    """The validator chain."""

    plugin: EnvOnly | None = opt(description="Device plugin validation.")
    toolkit: EnvOnly | None = opt(description="Toolkit validation.")
    driver: EnvOnly | None = opt(description="Driver validation.")
    cuda: EnvOnly | None = opt(description="CUDA workload validation.")
    vfio_pci: EnvOnly | None = opt(alias="vfioPCI", description="vfio-pci validation.")
    vgpu_manager: EnvOnly | None = opt(description="vGPU manager validation.")
    vgpu_devices: EnvOnly | None = opt(description="vGPU devices validation.")


class StartupTaintSpec(ApiModel):
    """Extension: the taint new GPU nodes register with (the cluster's node groups add it), which the operator
    removes once the node's validator has passed, so no workload lands on a GPU stack not yet validated."""

    enabled: bool | None = opt(description="Extension: remove the startup taint from validated GPU nodes "
                               "(default false); every operand tolerates it.")  # fmt: skip
    key: TaintKey = Field(
        default=keys.STARTUP_TAINT,
        description="Extension: the taint's key (any value and effect); the default's prefix is the one the "
        "cluster autoscaler knows as a startup taint.",
    )


class MaintenanceWindowSpec(ApiModel):
    """Extension: one recurring maintenance window."""

    schedule: Schedule = Field(description="Extension: when the window opens, in cron form (minute hour "
                               "day-of-month month day-of-week, e.g. '0 2 * * sat'; or @daily...).")  # fmt: skip
    duration: WindowLength = Field(description="Extension: how long it stays open: hours and/or minutes "
                                   "(90m, 4h, 1h30m; at most 168h).")  # fmt: skip


class MaintenanceWindowsSpec(ApiModel):
    """Extension: disruptive work (driver upgrades cordoning and draining a node) starts only inside these
    windows; a node already under way finishes. Absent: any time, as NVIDIA's operator."""

    time_zone: TimeZone = Field(default="UTC", description="Extension: the IANA time zone of the schedules "
                                "(e.g. Europe/Berlin); default UTC.")  # fmt: skip
    windows: list[MaintenanceWindowSpec] = Field(min_length=1, description="Extension: the windows; work may "
                                                 "start while any of them is open.")  # fmt: skip

    def schedule(self) -> WindowSchedule:
        return WindowSchedule.parse(zone=self.time_zone, windows=[(w.schedule, w.duration) for w in self.windows])


class EnabledOnly(ApiModel):
    """A feature with only an on/off switch."""

    enabled: bool | None = opt(description="Turn the feature on (default false).")


class CDISpec(ApiModel):
    """Container Device Interface settings."""

    enabled: bool = Field(default=True, description="Use CDI to inject GPUs into containers.")
    default: bool = Field(default=False, description="Deprecated: CDI is the default mode when enabled.")
    nri_plugin_enabled: bool = Field(default=False, description="Inject devices with the NRI plugin.")


class HostPathsSpec(ApiModel):
    """Host paths the operands use."""

    root_fs: HostRoot | None = opt(alias="rootFS", description="Host root filesystem (Helm default /).")
    driver_install_dir: HostPathOrUnset | None = opt(description="Where a containerised driver is installed.")
    kubelet_root_dir: HostPathOrUnset = Field(default="/var/lib/kubelet", description="The kubelet's root directory.")


class GPUDirectStorageSpec(SidecarComponent):
    """GPUDirect Storage (nvidia-fs sidecar of the driver)."""


class GDRCopySpec(SidecarComponent):
    """GDRCopy (gdrdrv sidecar of the driver)."""


def _nri_requires_cdi_and_toolkit(spec: ClusterPolicySpec) -> bool:
    if not spec.cdi.nri_plugin_enabled:
        return True
    toolkit_on = spec.toolkit.enabled is None or spec.toolkit.enabled
    return spec.cdi.enabled and toolkit_on


class ClusterPolicySpec(ApiModel):
    """The desired state of GPU nodes in the cluster."""

    rules = (
        Rule(
            # has() guards: the API server also evaluates rules on the schema's default values.
            cel=(
                "!has(self.cdi) || !has(self.cdi.nriPluginEnabled) || !self.cdi.nriPluginEnabled"
                " || ((!has(self.cdi.enabled) || self.cdi.enabled)"
                " && (!has(self.toolkit) || !has(self.toolkit.enabled) || self.toolkit.enabled))"
            ),
            message="cdi.nriPluginEnabled requires cdi.enabled and toolkit.enabled",
            check=_nri_requires_cdi_and_toolkit,
            field_path=".cdi.nriPluginEnabled",
        ),
    )

    operator: OperatorSpec = section(OperatorSpec, description="The operator itself.")
    daemonsets: DaemonsetsSpec = section(DaemonsetsSpec, description="Settings of every operand DaemonSet.")
    driver: DriverSpec = section(DriverSpec, description="The NVIDIA driver.")
    toolkit: ToolkitSpec = section(ToolkitSpec, description="The container toolkit.")
    device_plugin: DevicePluginSpec = section(DevicePluginSpec, description="The kubelet device plugin.")
    dcgm: DCGMSpec = section(DCGMSpec, description="The standalone DCGM host engine.")
    dcgm_exporter: DCGMExporterSpec = section(DCGMExporterSpec, description="The metrics exporter.")
    gfd: GPUFeatureDiscoverySpec = section(GPUFeatureDiscoverySpec, description="GPU feature discovery.")
    mig: MIGSpec = section(MIGSpec, description="How MIG devices are exposed.")
    mig_manager: MIGManagerSpec = section(MIGManagerSpec, description="The MIG manager.")
    node_status_exporter: NodeStatusExporterSpec = section(
        NodeStatusExporterSpec, description="The node status exporter."
    )
    validator: ValidatorSpec = section(ValidatorSpec, description="The validator chain.")
    psp: EnabledOnly | None = opt(description="Deprecated PodSecurityPolicy switch.")
    psa: EnabledOnly = section(EnabledOnly, description="Label the operator namespace for Pod Security.")
    cdi: CDISpec = section(CDISpec, description="Container Device Interface.")
    sandbox_workloads: SandboxWorkloadsSpec = section(SandboxWorkloadsSpec, description="VM workloads.")
    vgpu_manager: VGPUManagerSpec = section(VGPUManagerSpec, description="The vGPU host manager.")
    vgpu_device_manager: VGPUDeviceManagerSpec = section(VGPUDeviceManagerSpec, description="The vGPU device manager.")
    vfio_manager: VFIOManagerSpec = section(VFIOManagerSpec, description="The vfio-pci manager.")
    sandbox_device_plugin: SandboxDevicePluginSpec = section(
        SandboxDevicePluginSpec, description="The KubeVirt sandbox device plugin."
    )
    kata_sandbox_device_plugin: SandboxDevicePluginSpec = section(
        SandboxDevicePluginSpec, description="The Kata sandbox device plugin."
    )
    kata_manager: KataManagerSpec | None = opt(description="Deprecated, ignored.")
    cc_manager: CCManagerSpec = section(CCManagerSpec, description="The confidential-computing manager.")
    host_paths: HostPathsSpec = section(HostPathsSpec, description="Host paths.")
    gds: GPUDirectStorageSpec | None = opt(description="GPUDirect Storage.")
    gdrcopy: GDRCopySpec | None = opt(description="GDRCopy.")
    startup_taint: StartupTaintSpec = section(
        StartupTaintSpec, description="Extension: hold new GPU nodes tainted until their stack is validated."
    )
    maintenance_windows: MaintenanceWindowsSpec | None = opt(
        description="Extension: when disruptive work may start (cron schedules in a time zone); absent: any time."
    )
    remediation: RemediationSpec = section(
        RemediationSpec, description="Extension: light remediation of GPU nodes after XID errors (default off)."
    )


def schedule_of(spec: ClusterPolicySpec) -> WindowSchedule | None:
    """The policy's maintenance windows, ready to evaluate; None when it has none (any time)."""
    return spec.maintenance_windows.schedule() if spec.maintenance_windows is not None else None


class ClusterPolicyStatus(ApiModel):
    """The observed state of the policy."""

    state: Literal["ignored", "ready", "notReady"] | None = opt(description="ready, notReady or ignored.")
    namespace: str | None = opt(description="The operator namespace.")
    conditions: list[Condition] | None = opt(description="Ready and Error conditions.")
    driver_upgrade: DriverUpgradeStatus | None = opt(description="Progress of rolling driver upgrades.")
    remediation: RemediationStatus | None = opt(description="Extension: light remediation after XID errors now.")


class ClusterPolicy(ApiModel):
    """The cluster-wide GPU policy (one is active: the oldest)."""

    crd_plural: ClassVar[str] = "clusterpolicies"

    api_version: Literal["nvidia.com/v1"] = Field(default="nvidia.com/v1", alias="apiVersion")
    kind: Literal["ClusterPolicy"] = "ClusterPolicy"
    metadata: ObjectMeta
    spec: ClusterPolicySpec = section(ClusterPolicySpec)
    status: ClusterPolicyStatus | None = None


_Doc = TypeVar("_Doc", bound=Mapping[str, Any])


def active_policy(policies: Sequence[_Doc]) -> _Doc | None:
    """The one policy in effect: the oldest live one by creation time, name as tie-break (upstream's
    singleton rule; the others are ``ignored``)."""
    live = [p for p in policies if not p["metadata"].get("deletionTimestamp")]
    return min(live, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]), default=None)


__all__ = ["ClusterPolicy", "ClusterPolicySpec", "ClusterPolicyStatus", "EnvVar", "active_policy"]
