"""Why each Network Operator operand asks for what it asks of the node: data for docs/security.md.

Keyed like :mod:`gpu_operator.render.privilege_reasons` by (workload, container, privilege). These
operands run NVIDIA's (Mellanox's) own images, whose manifests are upstream's contract; a reason says
what the image does with the privilege, and where upstream asks for more than the work needs, says so.
The OFED driver's DaemonSets are named per OS and kernel; the table shows them as ``mofed-<os>-ds``.
"""

from __future__ import annotations

from types import MappingProxyType

_BEFORE_NETWORK = "installs CNI pieces the pod network itself may need: it cannot wait for that network"
_CNI_BIN = "installs its CNI binary where the kubelet's container runtime looks for plugins"
_SELINUX = (
    "writes host directories; on SELinux hosts (RHEL, OpenShift) only a privileged (`spc_t`) container may, "
    "and upstream's manifest asks for it everywhere. It copies files and does nothing else privileged"
)
_KUBELET_PLUGIN = "serves its device-plugin socket where the kubelet looks for plugins"
_REGISTRY = "the kubelet's plugin registration directory, which it watches for new sockets"
MOFED = "mofed-<os>-ds"
_SRIOV = ("network-operator-sriov-device-plugin", "kube-sriovdp")
_DOCA = ("doca-telemetry-service", "doca-telemetry-service")
_NFD_FEATURES = "host path /etc/kubernetes/node-feature-discovery/features.d (read-write)"
_UFM = "reaches the InfiniBand fabric manager (UFM) on the nodes' management network"

_TABLE: dict[tuple[str, str, str], str] = {
    # Secondary networks: the CNI installers.
    ("cni-plugins-ds", "", "hostNetwork"): _BEFORE_NETWORK,
    ("cni-plugins-ds", "cni-plugins", "host path /opt/cni/bin (read-write)"): (
        "installs the reference CNI plugins (macvlan, host-device, ipvlan...) the secondary networks use"
    ),
    ("cni-plugins-ds", "cni-plugins", "privileged"): _SELINUX,
    ("kube-ipoib-cni-ds", "", "hostNetwork"): _BEFORE_NETWORK,
    ("kube-ipoib-cni-ds", "ipoib-cni", "host path /opt/cni/bin (read-write)"): _CNI_BIN,
    ("kube-ipoib-cni-ds", "ipoib-cni", "privileged"): _SELINUX,
    ("kube-multus-ds", "", "hostNetwork"): "multus is called for every pod's network, the primary one included",
    ("kube-multus-ds", "kube-multus", "host path /etc/cni/net.d (read-write)"): (
        "writes its configuration ahead of the primary network's, so the runtime calls multus first"
    ),
    ("kube-multus-ds", "kube-multus", "host path /opt/cni/bin (read-write)"): _CNI_BIN,
    ("kube-multus-ds", "kube-multus", "privileged"): _SELINUX,
    ("kube-multus-ds", "kube-multus", "root (uid 0)"): "the CNI directories it writes are root's",
    ("nv-ipam-node", "nv-ipam-node", "host path /etc/cni/net.d/nv-ipam.d (read-write)"): (
        "writes the IPAM plugin's configuration, which the CNI binary reads on each call"
    ),
    ("nv-ipam-node", "nv-ipam-node", "host path /opt/cni/bin (read-write)"): _CNI_BIN,
    ("nv-ipam-node", "nv-ipam-node", "host path /var/lib/cni/nv-ipam/ (read-write)"): (
        "keeps the node's address allocations, so a restart hands out no address twice"
    ),
    ("nv-ipam-node", "nv-ipam-node", "privileged"): _SELINUX,
    ("ib-kubernetes", "", "hostNetwork"): _UFM,
    # The OFED driver container.
    (MOFED, "", "hostNetwork"): (
        "reloads the NIC drivers, which takes the host's interfaces down and up: it cannot depend on a pod network"
    ),
    (MOFED, "mofed-container", "privileged"): (
        "loads and unloads kernel modules (CAP_SYS_MODULE) and reconfigures the host's network devices; no smaller "
        "set does"
    ),
    (MOFED, "mofed-container", "host path /dev/infiniband (read-write)"): (
        "the RDMA device nodes of the driver it loads"
    ),
    (MOFED, "mofed-container", "host path /etc (read-write)"): (
        "writes the host's module blacklist so the inbox drivers do not load over it after a reboot"
    ),
    (MOFED, "mofed-container", "host path /etc/modprobe.d/ib_core.conf (read-write)"): (
        "sets ib_core's options for the host's modprobe"
    ),
    (MOFED, "mofed-container", "host path /etc/network (read-write)"): (
        "restores the interfaces' configuration (ifupdown) after a driver reload"
    ),
    (MOFED, "mofed-container", "host path /lib/modules (read-write)"): (
        "installs the kernel modules it builds for the running kernel"
    ),
    (MOFED, "mofed-container", "host path /lib/udev (read-write)"): "installs the udev rules that name the NICs",
    (MOFED, "mofed-container", "host path /run/mellanox/drivers (read-write)"): (
        "publishes the driver's root, which the device plugins and GPUDirect RDMA (nvidia-peermem) wait on"
    ),
    (MOFED, "mofed-container", "host path /run/udev (read-only)"): "asks udev which interfaces it reloads",
    (MOFED, "mofed-container", "host path /usr (read-write)"): (
        "installs the user-space RDMA libraries and tools (rdma-core) matching the driver"
    ),
    (MOFED, "mofed-container", "host path /var/opt/mofed-container/inventory (read-write)"): (
        "keeps the driver packages built per kernel, so a restart loads instead of rebuilding"
    ),
    # Device plugins.
    ("rdma-shared-dp-ds", "", "hostNetwork"): "the RDMA devices it shares belong to the host's network namespace",
    ("rdma-shared-dp-ds", "rdma-shared-dp", "host path /dev/ (read-write)"): (
        "hands the RDMA device nodes (`/dev/infiniband/*`) to pods"
    ),
    ("rdma-shared-dp-ds", "rdma-shared-dp", "host path /var/lib/kubelet/device-plugins (read-write)"): _KUBELET_PLUGIN,
    ("rdma-shared-dp-ds", "rdma-shared-dp", "host path /var/lib/kubelet/plugins_registry (read-write)"): _REGISTRY,
    ("rdma-shared-dp-ds", "rdma-shared-dp", "privileged"): (
        "enumerates the host's RDMA devices and their character devices through sysfs and `/dev`"
    ),
    ("network-operator-sriov-device-plugin", "", "hostNetwork"): (
        "the virtual functions it hands out are the host network namespace's interfaces"
    ),
    (*_SRIOV, "host path /var/lib/kubelet/device-plugins (read-write)"): _KUBELET_PLUGIN,
    (*_SRIOV, "host path /var/lib/kubelet/plugins_registry (read-write)"): _REGISTRY,
    (*_SRIOV, "host path /var/log (read-write)"): (
        "upstream's image writes its log file to the host's `/var/log`; nothing else there"
    ),
    (*_SRIOV, "host path /var/run/k8s.cni.cncf.io/devinfo/dp (read-write)"): (
        "writes which virtual function each pod got, for the CNI plugin that moves it into the pod"
    ),
    (*_SRIOV, "privileged"): (
        "reads and binds virtual functions through sysfs and opens their VFIO and RDMA device nodes"
    ),
    # Discovery and telemetry.
    ("nic-feature-discovery-ds", "nic-feature-discovery", _NFD_FEATURES): (
        "writes NFD's local feature file, from which NFD labels the node with its NICs"
    ),
    ("nic-feature-discovery-ds", "nic-feature-discovery", "privileged"): (
        "reads the NICs' firmware and PCI configuration, which needs raw device access (upstream's manifest)"
    ),
    ("doca-telemetry-service", "", "hostNetwork"): (
        "reads the host's NIC counters and serves them on the node's address"
    ),
    (*_DOCA, "host path /var/lib/kubelet/pod-resources (read-write)"): (
        "connects to the kubelet's pod-resources socket to map counters to pods (upstream mounts the directory "
        "read-write; connecting needs no write)"
    ),
    (*_DOCA, "host path /var/run/k8s.cni.cncf.io/devinfo/cni/ (read-write)"): (
        "reads which virtual function each pod got, to label its counters"
    ),
    (*_DOCA, "privileged"): (
        "reads the NICs' hardware counters through their management interfaces (devlink, PCI)"
    ),
}  # fmt: skip

#: (workload, container, privilege) -> why; read-only.
NETWORK_REASONS = MappingProxyType(_TABLE)
