"""Every ``nvidia.com/*`` (and NFD) label, annotation and resource name the operator and its agents use.

Upstream's spellings: node labels, dashboards and automation written for NVIDIA's operator keep
working. Grouped by who writes them; each key has exactly one writer (see docs/architecture.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# --- NFD (node-feature-discovery writes these; we read them) ---------------------------------------
NFD_PREFIX = "feature.node.kubernetes.io/"
NFD_NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OS_VERSION_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"

# --- GPU detection (the discovery agent writes these when NFD is absent) --------------------------
GPU_DISCOVERED = "nvidia.com/gpu.discovered"
DISCOVERED_OS_ID = "nvidia.com/gpu-discovery.os-release.ID"
DISCOVERED_OS_VERSION = "nvidia.com/gpu-discovery.os-release.VERSION_ID"

# --- Node labels the operator writes ---------------------------------------------------------------
GPU_PRESENT = "nvidia.com/gpu.present"
#: The taint new GPU nodes register with until their stack is validated (our extension ``startupTaint``): the
#: cluster autoscaler treats taints under this prefix as startup taints, expected to go away by themselves.
STARTUP_TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/nvidia-gpu"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."  # + operand: "true"/"false", or "paused-for-..." by the managers
DEPLOY_OPERANDS = "nvidia.com/gpu.deploy.operands"  # "false": no operand on this node at all
DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"  # "pre-installed": the host has its own driver
WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
GPU_PRODUCT = "nvidia.com/gpu.product"  # written by GFD

# --- Objects the operator renders ------------------------------------------------------------------
OPERAND_STATE = "nvidia.com/gpu-operator.state"  # on every operand object: the state it belongs to
APPLIED_HASH = "nvidia.com/last-applied-hash"
DRIVER_CR = "nvidia.com/gpu-operator.driver"  # a driver DaemonSet's NVIDIADriver
DRIVER_OWNER = "nvidia.com/gpu-operator.driver.owner"  # node label: the NVIDIADriver that drives it
#: DaemonSet annotation: "agent" (this operator's agent) or "nvidia" (NVIDIA's image, NVIDIA's contract).
IMPLEMENTATION = "nvidia.com/gpu-operator.implementation"
NODE_OS_VERSION = "nvidia.com/node.os-version"  # per-OS DaemonSet label (driver, vGPU manager): its image's OS tag

# --- Device plugin, MIG manager -------------------------------------------------------------------
DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_CONFIG_REASON = "nvidia.com/mig.config.state.reason"


# --- Driver upgrades (the upgrade controller writes these; the driver manager reads some) ----------
@dataclass(frozen=True, kw_only=True)
class UpgradeKeys:
    """Every node label and annotation of one driver's upgrade state machine.

    Upstream's ``SetDriverName(name)``: the same machine runs for the GPU driver (``gpu``) and the
    Network Operator's OFED driver (``ofed``), each under its own ``nvidia.com/<name>-driver-upgrade*``
    keys, so both can upgrade the same node without seeing each other's state.
    """

    driver: str
    prefix: str  # every key below starts with it
    state: str
    skip: str
    drain_skip: str  # a pod label: pods carrying it =true are never drained
    initial_unschedulable: str
    wait_start: str
    validation_start: str
    requested: str
    requestor_mode: str
    safe_load: str  # the driver container waits on it before loading (safe driver load)
    enabled: str
    # Ours (upstream keeps these in memory): when pod deletion and drain began, and why a node failed.
    deletion_start: str
    drain_start: str
    failure: str
    event_reason: str  # of the Events on the Node (upstream: "GPUDriverUpgrade", "OFEDDriverUpgrade")


@functools.cache
def upgrade_keys(driver: str) -> UpgradeKeys:
    """The keys of ``driver``'s upgrades, in upstream's spelling (k8s-operator-libs ``pkg/upgrade/consts.go``)."""
    prefix = f"nvidia.com/{driver}-driver-upgrade"
    return UpgradeKeys(
        driver=driver,
        prefix=prefix,
        state=f"{prefix}-state",
        skip=f"{prefix}.skip",
        drain_skip=f"{prefix}-drain.skip",
        initial_unschedulable=f"{prefix}.node-initial-state.unschedulable",
        wait_start=f"{prefix}-wait-for-pod-completion-start-time",
        validation_start=f"{prefix}-validation-start-time",
        requested=f"{prefix}-requested",
        requestor_mode=f"{prefix}-requestor-mode",
        safe_load=f"{prefix}.driver-wait-for-safe-load",
        enabled=f"{prefix}-enabled",
        deletion_start=f"{prefix}-pod-deletion-start-time",
        drain_start=f"{prefix}-drain-start-time",
        failure=f"{prefix}-failure",
        event_reason=f"{driver.upper()}DriverUpgrade",
    )


#: The drivers whose upgrades may share a node (GPU Operator's and Network Operator's): each machine
#: leaves a cordon that another one holds alone.
UPGRADE_DRIVERS = ("gpu", "ofed")
GPU_UPGRADE = upgrade_keys("gpu")
UPGRADE_PREFIX = GPU_UPGRADE.prefix  # "nvidia.com/gpu-driver-upgrade"
UPGRADE_STATE = GPU_UPGRADE.state
UPGRADE_SKIP = GPU_UPGRADE.skip
UPGRADE_DRAIN_SKIP = GPU_UPGRADE.drain_skip
UPGRADE_INITIAL_UNSCHEDULABLE = GPU_UPGRADE.initial_unschedulable
UPGRADE_WAIT_START = GPU_UPGRADE.wait_start
UPGRADE_VALIDATION_START = GPU_UPGRADE.validation_start
UPGRADE_REQUESTED = GPU_UPGRADE.requested
UPGRADE_ENABLED = GPU_UPGRADE.enabled
UPGRADE_DELETION_START = GPU_UPGRADE.deletion_start
UPGRADE_DRAIN_START = GPU_UPGRADE.drain_start
UPGRADE_FAILURE = GPU_UPGRADE.failure
DRIVER_MANAGER_CORDONED = "nvidia.com/gpu-driver-manager.cordoned"
# Ours: canary rollouts (docs/canary-rollouts.md). The driver DaemonSets say which spec.driver they were
# rendered from (a digest; the canary stage compares it with the rollout's target and last good one); the
# rollout's state lives in one ConfigMap per partition; `gpu-operator upgrade rollback` asks by annotation.
DRIVER_SPEC_DIGEST = "nvidia.com/driver-spec-digest"
DRIVER_ROLLOUT_CONFIGMAP = "nvidia-driver-rollout"
DRIVER_ROLLBACK_REQUESTED = "nvidia.com/driver-rollback-requested"
DRIVER_ROLLOUT_PHASE = "nvidia.com/driver-rollout-phase"
CANARY_PROBE_LABEL = "nvidia.com/driver-canary-probe"

# --- Light remediation (the remediation controller writes these; the cluster's reboot tooling reads one) --
REMEDIATION_PREFIX = "nvidia.com/gpu-remediation"
REMEDIATION_TAINT = REMEDIATION_PREFIX  # taint nvidia.com/gpu-remediation=<action>:NoSchedule while in remediation
REMEDIATION_STATE = f"{REMEDIATION_PREFIX}.state"  # annotation: taint, drain, reset or reboot
REMEDIATION_XID = f"{REMEDIATION_PREFIX}.xid"  # annotation: the XID that chose the action
REMEDIATION_SINCE = f"{REMEDIATION_PREFIX}.since"  # annotation: RFC 3339 time the remediation began
REMEDIATION_BOOT_ID = f"{REMEDIATION_PREFIX}.boot-id"  # annotation: the node's bootID when a reboot was asked
#: Annotation left when a node leaves remediation: XIDs up to this RFC 3339 time are answered.
REMEDIATION_HANDLED = f"{REMEDIATION_PREFIX}.handled-until"
#: Annotation for the cluster's own reboot tooling: the RFC 3339 time a reboot was asked for.
REMEDIATION_REBOOT_REQUESTED = f"{REMEDIATION_PREFIX}.reboot-requested"
REMEDIATION_ANNOTATIONS = (
    REMEDIATION_STATE,
    REMEDIATION_XID,
    REMEDIATION_SINCE,
    REMEDIATION_BOOT_ID,
    REMEDIATION_REBOOT_REQUESTED,
)

# --- Extended resources and CDI ---------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_RESOURCE_PREFIXES = (GPU_RESOURCE, MIG_RESOURCE_PREFIX)
CDI_KIND = "nvidia.com/gpu"
