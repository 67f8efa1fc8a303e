"""Why each GPU operand asks for what it asks of the node: data for docs/security.md.

Keyed by (workload, container, privilege) as :func:`gpu_operator.render.privileges.workload_needs` names
them; container "" is the pod's own, workload ``*`` every workload that has that container. The golden
tests fail when a rendered privilege has no reason here or a reason here is for nothing rendered, so a
new privilege cannot land unexplained.
"""

from __future__ import annotations

from types import MappingProxyType

from gpu_operator.render.privileges import ANY_WORKLOAD as ANY

_ROOT_FILES = "host files it reads or writes are root's; without capabilities, uid 0 is just their owner"
_VALIDATIONS_RO = "reads the validators' status files (`/run/nvidia/validations`), never writes them"
_VALIDATIONS_RW = "writes its component's status file there, the file the next operand waits for"
_HOST_ROOT_RO = "reads the driver's files where they are installed: the host's, or the driver container's"

_VALIDATOR_INIT = {
    "host path / (read-only)": _HOST_ROOT_RO,
    "host path /run/nvidia/validations (read-write)": _VALIDATIONS_RW,
    "root (uid 0)": _ROOT_FILES,
}

_DRIVER_ROOT_RW = "installs, loads and unloads the kernel modules and their files on the host (chroot into /host)"
_DRIVER_RUN = "publishes the driver root (`/run/nvidia/driver`) that the toolkit, the validators and workloads use"
_PRIVILEGED_MODULES = "loads and unloads kernel modules (CAP_SYS_MODULE) and creates device nodes; no smaller set does"

_TABLE: dict[tuple[str, str, str], str] = {
    # Every validator's init containers (toolkit, plugin, vfio-pci, vGPU checks) ask the same.
    **{(ANY, f"{c}-validation", what): why for c in ("toolkit", "plugin") for what, why in _VALIDATOR_INIT.items()},
    **{
        ("nvidia-sandbox-validator", f"{c}-validation", what): why
        for c in ("vfio-pci", "vgpu-manager", "vgpu-devices")
        for what, why in _VALIDATOR_INIT.items()
    },
    ("nvidia-operator-validator", "plugin-validation", "host path /var/lib/kubelet/pod-resources (read-only)"): (
        "asks the kubelet's pod-resources API which GPUs are allocatable"
    ),
    # The driver check runs in the toolkit's pod and the validator's.
    **{
        (ds, "driver-validation", what): why
        for ds in ("nvidia-container-toolkit-daemonset", "nvidia-operator-validator")
        for what, why in {
            "privileged": (
                "creates the `/dev/char` links of the NVIDIA device nodes on the host (systemd's cgroup rules "
                "need them)"
            ),
            "host path / (read-write)": "the `/dev/char` links live on the host; reads the driver's files",
            "root (uid 0)": _ROOT_FILES,
        }.items()
    },
    ("nvidia-operator-validator", "cuda-validation", "privileged"): (
        "opens every GPU's device nodes, `nvidia-uvm` included, to run a CUDA kernel on each"
    ),
    ("nvidia-operator-validator", "cuda-validation", "host path / (read-only)"): (
        "loads the driver's `libcuda.so.1` from where the driver is installed"
    ),
    ("nvidia-operator-validator", "cuda-validation", "host path /run/nvidia/validations (read-write)"): _VALIDATIONS_RW,
    ("nvidia-operator-validator", "cuda-validation", "root (uid 0)"): _ROOT_FILES,
    ("nvidia-operator-validator", "nvidia-operator-validator", "root (uid 0)"): (
        "the agent runtime marks readiness under `/run`, which is root's in the image; no capability, no host path"
    ),
    ("nvidia-sandbox-validator", "nvidia-sandbox-validator", "root (uid 0)"): (
        "the agent runtime marks readiness under `/run`, which is root's in the image; no capability, no host path"
    ),
    # Driver: the manager, the driver container and the peermem sidecar share one pod.
    ("nvidia-driver-daemonset", "", "hostPID"): (
        "the manager finds and stops host processes holding the GPUs before it unloads the modules"
    ),
    **{
        ("nvidia-driver-daemonset", c, what): why
        for c in ("k8s-driver-manager", "nvidia-driver-ctr", "nvidia-peermem-ctr")
        for what, why in {
            "privileged": _PRIVILEGED_MODULES,
            "host path / (read-write)": _DRIVER_ROOT_RW,
            "host path /run/nvidia (read-write)": _DRIVER_RUN,
            "root (uid 0)": "loading kernel modules and writing /lib/modules need uid 0 as well as the capability",
        }.items()
    },
    ("nvidia-driver-daemonset", "k8s-driver-manager", "host path /run/mellanox/drivers (read-write)"): (
        "with RDMA, waits for the OFED driver's ready file before the GPU driver loads"
    ),
    ("nvidia-driver-daemonset", "nvidia-peermem-ctr", "host path /run/mellanox/drivers (read-write)"): (
        "loads `nvidia-peermem` against the OFED driver the network operator publishes there"
    ),
    # Container toolkit.
    ("nvidia-container-toolkit-daemonset", "", "hostPID"): (
        "restarts the container runtime (containerd, CRI-O, Docker) by signalling its process"
    ),
    ("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", "privileged"): (
        "signals the runtime's host process and writes root-owned host files; upstream's toolkit is privileged too"
    ),
    ("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", "host path / (read-write)"): (
        "installs the runtime binaries under /usr/local/nvidia, edits the runtime's config (atomically, with a "
        "backup) and writes CDI specs under /var/run/cdi"
    ),
    (
        "nvidia-container-toolkit-daemonset",
        "nvidia-container-toolkit-ctr",
        "host path /run/nvidia/toolkit (read-write)",
    ): ("the toolkit's own state: its pid file"),
    ("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", "root (uid 0)"): _ROOT_FILES,
    # Device plugin and MPS.
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "privileged"): (
        "sees every GPU's device nodes, not only those its runtime injects, to report each GPU's health and "
        "hand out device specs; upstream's plugin is privileged in the operator too"
    ),
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "host path / (read-only)"): _HOST_ROOT_RO,
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "host path /run/nvidia/mps (read-write)"): (
        "with MPS sharing, the control daemon's pipe and log directory it hands to workloads"
    ),
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "host path /run/nvidia/validations (read-only)"): (
        _VALIDATIONS_RO
    ),
    (
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "host path /var/lib/kubelet/device-plugins (read-write)",
    ): ("creates its gRPC socket there and registers with the kubelet"),
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "host path /var/run/cdi (read-write)"): (
        "writes the CDI spec naming the devices it allocates (atomically)"
    ),
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin", "root (uid 0)"): _ROOT_FILES,
    ("nvidia-device-plugin-mps-control-daemon", "", "hostPID"): (
        "the control daemon serves clients in other pods' PID namespaces"
    ),
    ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-ctr", "privileged"): (
        "sets each shared GPU's compute mode to exclusive-process through NVML, which needs the devices and root"
    ),
    ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-ctr", "host path /run/nvidia/mps (read-write)"): (
        "the pipe and log directory MPS clients connect through"
    ),
    (
        "nvidia-device-plugin-mps-control-daemon",
        "mps-control-daemon-ctr",
        "host path /run/nvidia/mps/shm (read-write)",
    ): ("MPS's shared memory, mounted at /dev/shm and shared with its clients"),
    ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-ctr", "root (uid 0)"): _ROOT_FILES,
    # Telemetry and discovery.
    ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "host path /var/lib/kubelet/pod-resources (read-only)"): (
        "maps GPUs to the pods using them (the kubelet's pod-resources API)"
    ),
    ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", "root (uid 0)"): (
        "the kubelet's pod-resources socket is root's; no capability is kept"
    ),
    ("gpu-feature-discovery", "gpu-feature-discovery", "privileged"): (
        "reads whole PCI config spaces for the vGPU labels (the kernel returns only 64 bytes without CAP_SYS_ADMIN)"
    ),
    ("gpu-feature-discovery", "gpu-feature-discovery", "root (uid 0)"): "reading a full PCI config space needs uid 0",
    ("nvidia-gpu-discovery", "nvidia-gpu-discovery", "host path /etc (read-only)"): (
        "the host's os-release, for the OS labels a tagged driver image needs"
    ),
    ("nvidia-gpu-discovery", "nvidia-gpu-discovery", "host path /sys (read-only)"): (
        "finds NVIDIA PCI functions (vendor 0x10de) without NVML, before any driver is installed"
    ),
    ("nvidia-gpu-discovery", "nvidia-gpu-discovery", "host path /usr/lib (read-only)"): (
        "where `/etc/os-release` often links to"
    ),
    ("nvidia-gpu-discovery", "nvidia-gpu-discovery", "root (uid 0)"): (
        "the agent runtime marks readiness under `/run`, which is root's in the image; no capability is kept"
    ),
    ("nvidia-node-status-exporter", "nvidia-node-status-exporter", "host path / (read-only)"): _HOST_ROOT_RO,
    ("nvidia-node-status-exporter", "nvidia-node-status-exporter", "host path /run/nvidia/validations (read-only)"): (
        _VALIDATIONS_RO + ", and exports them as metrics"
    ),
    ("nvidia-node-status-exporter", "nvidia-node-status-exporter", "root (uid 0)"): _ROOT_FILES,
    # MIG manager.
    ("nvidia-mig-manager", "", "hostPID"): "stops and restarts host processes that hold the GPUs during a MIG change",
    ("nvidia-mig-manager", "nvidia-mig-manager", "privileged"): (
        "enables MIG mode, resets GPUs and creates GPU and compute instances through NVML: root's operations"
    ),
    ("nvidia-mig-manager", "nvidia-mig-manager", "host path / (read-write)"): (
        "stops and restarts host services holding the GPUs (`chroot /host systemctl`) and reaches the driver's files"
    ),
    ("nvidia-mig-manager", "nvidia-mig-manager", "root (uid 0)"): _ROOT_FILES,
}

#: (workload, container, privilege) -> why; read-only.
REASONS = MappingProxyType(_TABLE)
