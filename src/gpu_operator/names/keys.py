"""Every ``nvidia.com/*`` (and NFD) label, annotation and resource name the operator and its agents use.

Upstream's spellings: node labels, dashboards and automation written for NVIDIA's operator keep
working. Grouped by who writes them; each key has exactly one writer (see docs/architecture.md).
"""

from __future__ import annotations

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
UPGRADE_PREFIX = "nvidia.com/gpu-driver-upgrade"  # every upgrade label and annotation starts with it
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP = "nvidia.com/gpu-driver-upgrade.skip"
UPGRADE_DRAIN_SKIP = "nvidia.com/gpu-driver-upgrade-drain.skip"
UPGRADE_INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
UPGRADE_WAIT_START = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
UPGRADE_VALIDATION_START = "nvidia.com/gpu-driver-upgrade-validation-start-time"
UPGRADE_REQUESTED = "nvidia.com/gpu-driver-upgrade-requested"
UPGRADE_ENABLED = "nvidia.com/gpu-driver-upgrade-enabled"
UPGRADE_DELETION_START = "nvidia.com/gpu-driver-upgrade-pod-deletion-start-time"
UPGRADE_DRAIN_START = "nvidia.com/gpu-driver-upgrade-drain-start-time"
UPGRADE_FAILURE = "nvidia.com/gpu-driver-upgrade-failure"
DRIVER_MANAGER_CORDONED = "nvidia.com/gpu-driver-manager.cordoned"

# --- Extended resources and CDI ---------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_RESOURCE_PREFIXES = (GPU_RESOURCE, MIG_RESOURCE_PREFIX)
CDI_KIND = "nvidia.com/gpu"
