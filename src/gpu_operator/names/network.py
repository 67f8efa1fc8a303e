"""Every key, name and path of the Network Operator side, in upstream's spelling (Mellanox/network-operator).

Defined once: the API models, the renderer, the reconciler, the simulator and the chart read them
from here, so manifests, node labels and automation written for NVIDIA's Network Operator carry over.
"""

from __future__ import annotations

# --- API ---------------------------------------------------------------------------------------------
GROUP = "mellanox.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
NCP_KIND = "NicClusterPolicy"
NNP_KIND = "NicNodePolicy"
MACVLAN_KIND = "MacvlanNetwork"
HOSTDEVICE_KIND = "HostDeviceNetwork"
IPOIB_KIND = "IPoIBNetwork"
NETWORK_KINDS = (MACVLAN_KIND, HOSTDEVICE_KIND, IPOIB_KIND)
#: Only the NicClusterPolicy of this name is acted on; any other gets state ``ignore``.
NCP_NAME = "nic-cluster-policy"
NAD_API_VERSION = "k8s.cni.cncf.io/v1"
NAD_KIND = "NetworkAttachmentDefinition"
NAD_RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"  # annotation on a NAD: the device resource it needs

# --- Status values (NicClusterPolicy and the network kinds) -------------------------------------------
READY, NOT_READY, IGNORE, ERROR = "ready", "notReady", "ignore", "error"

# --- Objects the network operator renders -------------------------------------------------------------
STATE_LABEL = "nvidia.network-operator.state"  # on every rendered object: the state it belongs to
REVISION_ANNOTATION = "nvidia.network-operator.revision"  # hash of the rendered object
DS_OWNER_LABEL = "nvidia.network-operator.ds-owner"  # NicNodePolicy-owned objects: the owner's name
CONFIG_HASH_ANNOTATION = "nvidia.network-operator.config-hash"  # pod templates: hash of the mounted config
OFED_DRIVER_LABEL = "nvidia.com/ofed-driver"  # "" on every OFED pod (upstream's one-per-node anti-affinity key)

#: State names in upstream's order (``pkg/state``); every state syncs on every pass.
STATE_MULTUS = "state-multus-cni"
STATE_CNI_PLUGINS = "state-container-networking-plugins"
STATE_IPOIB = "state-ipoib-cni"
STATE_OFED = "state-OFED"
STATE_SRIOV_DP = "state-SRIOV-device-plugin"
STATE_RDMA_DP = "state-RDMA-device-plugin"
STATE_IB_KUBERNETES = "state-ib-kubernetes"
STATE_NV_IPAM = "state-nv-ipam-cni"
STATE_NIC_FD = "state-nic-feature-discovery"
STATE_DOCA_TELEMETRY = "state-doca-telemetry-service"
STATES = (
    STATE_MULTUS, STATE_CNI_PLUGINS, STATE_IPOIB, STATE_OFED, STATE_SRIOV_DP, STATE_RDMA_DP,
    STATE_IB_KUBERNETES, STATE_NV_IPAM, STATE_NIC_FD, STATE_DOCA_TELEMETRY,
)  # fmt: skip
#: A NicNodePolicy gets only these.
NNP_STATES = (STATE_OFED, STATE_SRIOV_DP, STATE_RDMA_DP)

# --- Node labels -------------------------------------------------------------------------------------
ARCH = "kubernetes.io/arch"  # the kubelet writes it; OFED pools are per architecture
NIC_PRESENT = "feature.node.kubernetes.io/pci-15b3.present"  # NFD (the chart's NodeFeatureRule) writes it
#: "false" once the node's OFED container is Ready, "true" before; the network operator is its one writer.
MOFED_WAIT = "network.nvidia.com/operator.mofed.wait"

# --- The OFED driver container -----------------------------------------------------------------------
OFED_CONTAINER = "mofed-container"
OFED_INIT_CONTAINER = "network-operator-init-container"  # upstream's optional safe-load init container
DRIVERS_DIR = "/run/mellanox/drivers"  # the container's exported root (Bidirectional mount)
DRIVER_READY = f"{DRIVERS_DIR}/.driver-ready"
OFED_DRIVER_NAME = "ofed"  # the upgrade state machine's driver name: nvidia.com/ofed-driver-upgrade-*
OFED_DS_PREFIX = "mofed-"

# --- Operator process --------------------------------------------------------------------------------
FIELD_MANAGER = "network-operator"
LEASE_NAME = "12620820.mellanox.com"  # upstream's leader-election ID

# --- Container names (upstream's manifests); the simulator's stand-ins are chosen by them ---------------
MULTUS_CONTAINER = "kube-multus"
CNI_PLUGINS_CONTAINER = "cni-plugins"
IPOIB_CONTAINER = "ipoib-cni"
SRIOV_DP_CONTAINER = "kube-sriovdp"
RDMA_DP_CONTAINER = "rdma-shared-dp"
IB_KUBERNETES_CONTAINER = "ib-kubernetes"
NV_IPAM_NODE_CONTAINER = "nv-ipam-node"
NV_IPAM_CONTROLLER_CONTAINER = "nv-ipam-controller"
NIC_FD_CONTAINER = "nic-feature-discovery"
DOCA_TELEMETRY_CONTAINER = "doca-telemetry-service"

# --- NIC feature discovery (agent nic-feature-discovery) -----------------------------------------------
#: Upstream nic-feature-discovery's one label: the out-of-tree mlx5_core version (/sys/module/mlx5_core/version).
NIC_FD_MOFED_VERSION = "nvidia.com/mofed.version"
#: This operator's own NIC labels; the agent owns every key under this prefix (and the one above).
NIC_FD_PREFIX = "network.nvidia.com/nic."
NIC_FD_COUNT = f"{NIC_FD_PREFIX}count"  # Mellanox physical functions (ports)
NIC_FD_PRODUCT = f"{NIC_FD_PREFIX}product"  # the most common PF product, sanitised: ConnectX-6-Dx
NIC_FD_DRIVER = f"{NIC_FD_PREFIX}driver"  # the PFs' kernel driver: mlx5_core
NIC_FD_ETHERNET_COUNT = f"{NIC_FD_PREFIX}ethernet.count"  # PFs whose netdev is Ethernet
NIC_FD_INFINIBAND_COUNT = f"{NIC_FD_PREFIX}infiniband.count"  # PFs whose netdev is IPoIB
NIC_FD_RDMA = f"{NIC_FD_PREFIX}rdma"  # "true" when a PF has an RDMA device with its char devices
NIC_FD_RDMA_NETNS_MODE = f"{NIC_FD_PREFIX}rdma.netns-mode"  # shared | exclusive (absent when unknown)
NIC_FD_SRIOV_CAPABLE = f"{NIC_FD_PREFIX}sriov.capable"  # "true" when a PF has sriov_totalvfs > 0
NIC_FD_SRIOV_VFS = f"{NIC_FD_PREFIX}sriov.vfs"  # VFs configured over all PFs (sriov_numvfs)
NIC_FD_INTERVAL_ENV = "NIC_FD_INTERVAL"  # seconds between scans (60 by default, like upstream's 1m)
