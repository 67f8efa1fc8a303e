"""What one real node is, and its configuration files (pure: no I/O beyond returning text).

A node on this host is told apart from its neighbours by

* its **address**: the gateway address of its own bridge (``10.244.<index>.1``); the kubelet listens
  there and reports it as the node's InternalIP (kubelet refuses a loopback node IP), and its pods get
  ``10.244.<index>.0/24``;
* its **ports** (kubelet API and healthz), chosen free at start;
* its **mount namespace**: the kubelet's and containerd's fixed host paths (``/var/lib/kubelet``, the
  device-plugin socket under it, ``/run/containerd``, ``/etc/containerd``, ``/etc/cdi``, ...) are bind
  mounts of directories under the node's own data directory, so containerd, the kubelet and every
  container of the node see the standard paths while the host and the other nodes see their own;
* its **cgroups**: everything the node runs lives under ``/<run cgroup>/<node>`` (pods, through the
  kubelet's ``cgroupRoot``) and ``/<run cgroup>/<node>-runtime`` (containerd and its shims), so a run
  killed with SIGKILL can be found and removed whole.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: Pod subnets: node ``i`` (1-based) gets ``10.244.i.0/24``; its bridge's address is ``.1``.
POD_NETWORK_PREFIX = "10.244"
#: Host paths every node gets its own copy of (bind mounts inside the node's mount namespace).
PRIVATE_PATHS = (
    "/etc/cdi",
    "/etc/cni/net.d",
    "/etc/containerd",
    "/etc/kubernetes/node-feature-discovery",  # NFD's features.d, where GFD leaves a node's labels
    "/opt/cni/bin",  # plugins an operand installs (the multus shim): each node its own, searched first
    "/run/cdi",
    "/run/k8s.cni.cncf.io",  # device plugins' device-info files for CNI plugins (/var/run/k8s.cni.cncf.io)
    "/run/containerd",
    "/run/mellanox",  # MOFED's exported root and its .driver-ready, per node as a node's MOFED is
    "/run/nvidia",
    "/usr/local/nvidia",
    "/var/lib/cni",
    "/var/lib/containerd",
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
)
#: Host directories a node may overlay with files of its own (``NodeSpec.host_overlay``): what a
#: driver installed on the host adds (device nodes, libraries, tools, firmware), seen by this node only.
OVERLAY_PATHS = ("/dev", "/usr/lib/x86_64-linux-gnu", "/usr/bin", "/lib/firmware")
#: Mounts under /dev that an overlay on /dev would hide: bound again on top of it.
DEV_SUBMOUNTS = ("pts", "shm", "mqueue", "hugepages")
CNI_BIN_DIR = "/usr/lib/cni"
#: Where operands install CNI plugins (private per node), searched before the host's ``CNI_BIN_DIR``.
NODE_CNI_BIN_DIR = "/opt/cni/bin"
SYS_PCI_DEVICES = "/sys/bus/pci/devices"
#: The kernel's modules: a node with a fake kernel (``NodeSpec.fake_kernel``) overlays it with its own.
SYS_MODULE = "/sys/module"
#: The fake kernel's modules again, under /run/nvidia, which NVIDIA's driver container mounts
#: Bidirectional: a privileged container is given the machine's own sysfs, so the stand-in for NVIDIA's
#: driver image (``sim.fakedriver.standin``) binds this over its /sys/module, where the startup probe looks.
FAKE_KERNEL_SHARE = "/run/nvidia/.fake-kernel-modules"
RUNC = "/usr/sbin/runc"
CNI_NETWORK = "gpuop"
#: containerd plugins with a fixed path outside the private ones above (NRI's socket under /var/run/nri,
#: the opt plugin's /opt/containerd); nodes do not need them.
DISABLED_CONTAINERD_PLUGINS = ("io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt")


def private_dir_name(host_path: str) -> str:
    """The directory under a node's root that backs ``host_path`` (``/var/lib/kubelet`` -> ``var-lib-kubelet``)."""
    return host_path.strip("/").replace("/", "-")


@dataclass(frozen=True)
class NodeSpec:
    """One real node of a local cluster."""

    name: str
    index: int
    root: Path
    kubelet_port: int
    healthz_port: int
    run_cgroup: str
    #: Whether the node's namespace shows a fake PCI tree (``fake_pci_devices``) instead of the host's.
    fake_pci: bool = False
    #: Whether the namespace overlays ``OVERLAY_PATHS`` with ``host_overlay_root`` (host-installed files).
    host_overlay: bool = False
    #: Whether ``/sys/module`` is overlaid with ``fake_kernel_root``: modules a fake driver "loads" there.
    fake_kernel: bool = False
    #: Taints the kubelet registers its Node with (``registerWithTaints``), as a cloud node group's do.
    register_with_taints: tuple[Mapping[str, str], ...] = ()
    #: The kubelet's ``syncFrequency``: how often it syncs each pod, which is also how soon an edited
    #: ConfigMap reaches a pod's volume. The kubelet's default (60 s) unless a test asks for less.
    sync_frequency_s: int = 60

    def __post_init__(self) -> None:
        if not 1 <= self.index <= 250:
            raise ValueError(f"node index {self.index} is outside 1..250")
        if self.sync_frequency_s < 1:
            raise ValueError(f"sync_frequency_s {self.sync_frequency_s} must be at least 1 (seconds)")

    @property
    def address(self) -> str:
        return f"{POD_NETWORK_PREFIX}.{self.index}.1"

    @property
    def pod_subnet(self) -> str:
        return f"{POD_NETWORK_PREFIX}.{self.index}.0/24"

    @property
    def bridge(self) -> str:
        # Interface names are at most 15 characters.
        return f"gpuop-br{self.index}"

    @property
    def pods_cgroup(self) -> str:
        """The kubelet's ``cgroupRoot``."""
        return f"{self.run_cgroup}/{self.name}"

    @property
    def runtime_cgroup(self) -> str:
        """Where containerd and its shims run."""
        return f"{self.run_cgroup}/{self.name}-runtime"

    def private(self, host_path: str) -> Path:
        """The directory that is ``host_path`` inside this node's mount namespace."""
        return self.root / "private" / private_dir_name(host_path)

    @property
    def containerd_socket(self) -> Path:
        """containerd's socket as a host path (``/run/containerd/containerd.sock`` inside the namespace).

        Connect from inside the namespace: under a deep data directory this path can be longer than the
        108 bytes a unix socket address may have."""
        return self.private("/run/containerd") / "containerd.sock"

    @property
    def device_plugin_dir(self) -> Path:
        """The kubelet's device-plugin directory as the host sees it."""
        return self.private("/var/lib/kubelet") / "device-plugins"

    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's configuration, kubeconfig and certificates (not inside the namespace)."""
        return self.root / "kubelet"

    @property
    def fake_pci_devices(self) -> Path:
        """The fake PCI tree bound over ``/sys/bus/pci/devices`` inside the namespace (GPU profiles)."""
        return self.root / "fake-host" / "sys-bus-pci-devices"

    @property
    def host_overlay_root(self) -> Path:
        """Files this node adds to the host's ``/`` (e.g. ``dev/nvidia0``): the overlays' upper layers."""
        return self.root / "host-overlay" / "upper"

    @property
    def fake_kernel_root(self) -> Path:
        """The upper layer of the node's ``/sys/module`` (``nvidia/refcnt`` while "loaded")."""
        return self.root / "fake-kernel" / "upper"

    def overlay_work(self, host_path: str) -> Path:
        return self.root / "host-overlay" / "work" / private_dir_name(host_path)

    @property
    def ready_file(self) -> Path:
        """Written by the namespace holder once every bind mount is in place."""
        return self.root / "namespace-ready"


@dataclass(frozen=True, kw_only=True)
class NodeSetup:
    """What a caller gives one real node before it starts."""

    #: Overlay ``OVERLAY_PATHS`` with the node's ``host_overlay_root`` (files "installed on the host").
    host_overlay: bool = False
    #: Overlay ``/sys/module`` with the node's own (a kernel whose modules a fake driver loads).
    fake_kernel: bool = False
    #: Bind the node's fake PCI tree (``NodeSpec.fake_pci_devices``) over ``/sys/bus/pci/devices`` even
    #: when the node is given no PCI functions: ``prepare`` writes functions of its own there (NICs).
    fake_pci: bool = False
    #: Called after the node's files and directories exist, before any of its processes starts.
    prepare: Callable[[NodeSpec], None] | None = None
    #: Taints the Node registers with (``key``, ``value``, ``effect``): an autoscaled node group's startup taint.
    register_with_taints: tuple[Mapping[str, str], ...] = ()
    #: The kubelet's ``syncFrequency`` in seconds (``NodeSpec.sync_frequency_s``).
    sync_frequency_s: int = 60


def containerd_config(*, sandbox_image: str) -> str:
    """containerd 2.x configuration (format version 4) for a node; paths are those inside the namespace."""
    runtime = '[plugins."io.containerd.cri.v1.runtime"]'
    lines = [
        "# Written by gpu-operator's local cluster for one real node.",
        "version = 4",
        "disabled_plugins = [" + ", ".join(json.dumps(p) for p in DISABLED_CONTAINERD_PLUGINS) + "]",
        "",
        runtime,
        # The VM's root may lack CAP_SYS_RESOURCE; lowering a child's oom_score_adj below ours then fails.
        "  restrict_oom_score_adj = true",
        # Network namespaces under containerd's (private) state dir instead of the shared /var/run/netns.
        "  netns_mounts_under_state_dir = true",
        '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]',
        f"{runtime[:-1]}.containerd]",
        '  default_runtime_name = "runc"',
        f"{runtime[:-1]}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"{runtime[:-1]}.containerd.runtimes.runc.options]",
        f"  BinaryName = {json.dumps(RUNC)}",
        "  SystemdCgroup = false",
        f"{runtime[:-1]}.cni]",
        f"  bin_dirs = [{json.dumps(NODE_CNI_BIN_DIR)}, {json.dumps(CNI_BIN_DIR)}]",
        '  conf_dir = "/etc/cni/net.d"',
        "",
        '[plugins."io.containerd.cri.v1.images".pinned_images]',
        f"  sandbox = {json.dumps(sandbox_image)}",
        "",
        '[plugins."io.containerd.grpc.v1.cri"]',
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "",
    ]
    return "\n".join(lines)


def cni_conflist(*, spec: NodeSpec) -> str:
    """The node's CNI network: one bridge, host-local addresses, no masquerade (nothing leaves the host)."""
    network: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": spec.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": spec.pod_subnet, "gateway": spec.address}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
        ],
    }
    return json.dumps(network, indent=2) + "\n"


def kubelet_config(*, spec: NodeSpec, ca_file: Path, cert_file: Path, key_file: Path, cgroup_v1: bool) -> str:
    """The KubeletConfiguration of a node."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": spec.address,
        "port": spec.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": spec.healthz_port,
        "tlsCertFile": str(cert_file),
        "tlsPrivateKeyFile": str(key_file),
        # The API server authenticates with its kubelet client certificate (signed by the cluster CA).
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": spec.pods_cgroup,
        "cgroupsPerQOS": True,
        "failSwapOn": False,
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        "volumePluginDir": str(spec.root / "volume-plugins"),
        # The host's disk is shared by every node and the control plane: evict only when it is nearly full.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        # Locally imported images cannot be pulled again: never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "registerWithTaints": [dict(taint) for taint in spec.register_with_taints],
        "syncFrequency": f"{spec.sync_frequency_s}s",
        "maxPods": 110,
        "shutdownGracePeriod": "0s",
        "logging": {"format": "text"},
    }
    if cgroup_v1:
        config["failCgroupV1"] = False
    return yaml.safe_dump(config, sort_keys=True)


def kubelet_args(*, spec: NodeSpec, binary: Path, kubeconfig: Path, config: Path) -> list[str]:
    """argv of a node's kubelet."""
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={spec.name}",
        f"--node-ip={spec.address}",
        f"--cert-dir={spec.kubelet_dir / 'pki'}",
        "--v=1",
    ]


def namespace_script(*, spec: NodeSpec) -> str:
    """The shell script of a node's namespace holder: bind the private paths, say so, then wait.

    Every path is one quoted word: the node's root comes from the data directory the user chose."""
    q = _quoted
    # Shared, as systemd makes a host's "/": pods' HostToContainer and Bidirectional mounts (the
    # operands' host root, the driver root) need it. Peers are this namespace's mounts only.
    lines = ["set -e", "mount --make-rshared /"]
    for host_path in PRIVATE_PATHS:
        lines.append(f"mount --bind {q(spec.private(host_path))} {q(host_path)}")
    if spec.fake_pci:
        lines.append(f"mount --bind {q(spec.fake_pci_devices)} {q(SYS_PCI_DEVICES)}")
    if spec.host_overlay:
        lines += _overlay_lines(spec)
    if spec.fake_kernel:
        upper, work = spec.fake_kernel_root, spec.root / "fake-kernel" / "work"
        options = q(f"lowerdir={SYS_MODULE},upperdir={upper},workdir={work}")
        lines.append(f"mount -t overlay overlay -o {options} {q(SYS_MODULE)}")
        lines.append(f"mkdir -p {q(FAKE_KERNEL_SHARE)} && mount --bind {q(SYS_MODULE)} {q(FAKE_KERNEL_SHARE)}")
    lines.append(f"touch {q(spec.ready_file)}")
    lines.append("exec sleep infinity")
    return "\n".join(lines)


def _quoted(path: str | Path) -> str:
    return shlex.quote(str(path))


def _overlay_lines(spec: NodeSpec) -> list[str]:
    q = _quoted
    lines = []
    kept = spec.root / "host-overlay" / "dev-submounts"
    lines.append(f"mkdir -p {q(kept)} && mount --rbind /dev {q(kept)}")
    for host_path in OVERLAY_PATHS:
        upper = spec.host_overlay_root / host_path.lstrip("/")
        work = spec.overlay_work(host_path)
        options = q(f"lowerdir={host_path},upperdir={upper},workdir={work}")
        lines.append(f"mount -t overlay overlay -o {options} {q(host_path)}")
    for sub in DEV_SUBMOUNTS:
        lines.append(f"if mountpoint -q {q(kept / sub)}; then mount --rbind {q(kept / sub)} {q('/dev/' + sub)}; fi")
    return lines
