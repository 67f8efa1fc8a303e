"""What the renderer knows about the cluster and about the operator itself, as typed values.

:class:`ClusterFacts` is everything ``render`` reads from the cluster: the reconciler builds it from
the Node list (:func:`facts_from_nodes`) and a few lookups (ServiceMonitor CRD, ConfigMap and Secret
names, the ConfigMaps' keys). :class:`OperatorSettings` is what comes from the operator's own Deployment: the image the
node agents run in and the upstream ``*_IMAGE`` environment overrides (how OLM injects digests).

Both are frozen: a render is a function of its inputs, so the same facts give the same manifests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from gpu_operator import __version__
from gpu_operator.names import keys
from gpu_operator.render.images import IMAGE_ENV_VARS, RenderError

Runtime = Literal["containerd", "crio", "docker"]

NFD_PREFIX = keys.NFD_PREFIX
GPU_PRESENT = keys.GPU_PRESENT
#: Written by the discovery agent (no NFD): whether the node's PCI tree shows an NVIDIA GPU.
GPU_DISCOVERED = keys.GPU_DISCOVERED
#: NFD PCI labels that mark an NVIDIA GPU (vendor-only, 3D controller, VGA), node-labels.md §1.
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
OS_ID = keys.OS_ID
OS_VERSION = keys.OS_VERSION
OS_VERSION_MAJOR = keys.OS_VERSION_MAJOR
KERNEL = keys.KERNEL
#: Written by the discovery agent (no NFD): the node's os-release ID and VERSION_ID, for the driver tag.
DISCOVERED_OS_ID = keys.DISCOVERED_OS_ID
DISCOVERED_OS_VERSION = keys.DISCOVERED_OS_VERSION
#: Distributions whose driver images are tagged by major version only (``rhel9``).
MAJOR_ONLY_OS = frozenset({"rhel", "rocky", "ol"})

#: The product image (`make image`); the chart's default operator image too.
DEFAULT_AGENT_IMAGE = f"ghcr.io/gpu-operator-py/gpu-operator:v{__version__}"
AGENT_IMAGE_ENV = "AGENT_IMAGE"


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    """The parts of a Node the renderer and the driver router read."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    runtime_version: str = ""  # status.nodeInfo.containerRuntimeVersion, e.g. containerd://2.1.4
    creation: str = ""  # metadata.creationTimestamp, orders "the first GPU node"

    @property
    def gpu(self) -> bool:
        """A GPU node: ``nvidia.com/gpu.present=true``, or NFD's PCI label before the labeller ran."""
        present = self.labels.get(GPU_PRESENT)
        if present is not None:
            return present == "true"
        return any(self.labels.get(key) == "true" for key in NFD_GPU_LABELS)

    @property
    def os_tag(self) -> str | None:
        return os_tag(self.labels)

    @property
    def kernel(self) -> str | None:
        return self.labels.get(KERNEL) or None


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    """A :class:`NodeInfo` from a Node object as a dict (API JSON or a YAML file)."""
    meta = node.get("metadata") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        runtime_version=str(info.get("containerRuntimeVersion", "")),
        creation=str(meta.get("creationTimestamp", "")),
    )


def os_tag(labels: Mapping[str, str]) -> str | None:
    """The driver OS tag of a node (``ubuntu22.04``, ``rhel9``) from its NFD labels (or, without them,
    the discovery agent's), or None."""
    os_id = labels.get(OS_ID)
    if not os_id:
        own_id, own_version = labels.get(DISCOVERED_OS_ID), labels.get(DISCOVERED_OS_VERSION, "")
        if not own_id or not own_version:
            return None
        return f"{own_id}{own_version.split('.')[0]}" if own_id in MAJOR_ONLY_OS else f"{own_id}{own_version}"
    if os_id in MAJOR_ONLY_OS:
        major = labels.get(OS_VERSION_MAJOR) or labels.get(OS_VERSION, "").split(".")[0]
        return f"{os_id}{major}" if major else None
    version = labels.get(OS_VERSION)
    return f"{os_id}{version}" if version else None


def os_selector(labels: Mapping[str, str]) -> dict[str, str]:
    """Node labels that pick a node's OS for its driver DaemonSet: NFD's os-release labels (the major
    version for distributions tagged by it), else the discovery agent's."""
    os_id = labels.get(OS_ID)
    if os_id:
        if os_id in MAJOR_ONLY_OS and labels.get(OS_VERSION_MAJOR):
            return {OS_ID: os_id, OS_VERSION_MAJOR: labels[OS_VERSION_MAJOR]}
        return {OS_ID: os_id, OS_VERSION: labels.get(OS_VERSION, "")}
    return {
        DISCOVERED_OS_ID: labels.get(DISCOVERED_OS_ID, ""),
        DISCOVERED_OS_VERSION: labels.get(DISCOVERED_OS_VERSION, ""),
    }


def tag_selector(tag: str) -> dict[str, str]:
    """NFD's labels for an OS tag (``ubuntu22.04``, ``rhel9``): facts given by tag alone (tests, offline)."""
    index = next((i for i, ch in enumerate(tag) if ch.isdigit()), len(tag))
    os_id, version = tag[:index], tag[index:]
    return {OS_ID: os_id, OS_VERSION_MAJOR if os_id in MAJOR_ONLY_OS else OS_VERSION: version}


def detect_runtime(nodes: Iterable[NodeInfo]) -> Runtime:
    """containerd when any GPU node runs it; else the first docker or CRI-O node; default containerd."""
    versions = [n.runtime_version for n in nodes if n.gpu]
    if any(v.startswith("containerd://") for v in versions):
        return "containerd"
    for version in versions:
        if version.startswith("docker://"):
            return "docker"
        if version.startswith("cri-o://"):
            return "crio"
    return "containerd"


@dataclass(frozen=True, kw_only=True)
class ClusterFacts:
    """The cluster as the renderer sees it (reference §2.4, step 2).

    ``configmaps``/``secrets`` are the names that exist in the operator namespace; None means "not
    looked up" (the ``render`` command offline), so no reference is reported missing.
    ``configmap_keys`` maps each of those ConfigMaps to its ``data`` and ``binaryData`` keys, sorted
    (NVIDIA's driver contract mounts each key as a file); None means "not looked up". Given alone,
    it also fills ``configmaps``.
    """

    namespace: str
    gpu_node_count: int = 0
    has_nfd_labels: bool = False
    runtime: Runtime = "containerd"
    os_tag: str | None = None
    #: OS tag -> the node selector of its GPU nodes, for one driver DaemonSet per OS (tagged images).
    os_pools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    kernel_os: Mapping[str, str] = field(default_factory=dict)
    has_service_monitor_crd: bool = False
    #: NFD itself runs (its NodeFeature CRD exists), so something reads GFD's feature file.
    nfd_installed: bool = False
    openshift: bool = False
    kubernetes_version: str = ""
    configmaps: frozenset[str] | None = None
    secrets: frozenset[str] | None = None
    configmap_keys: Mapping[str, tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernel_os", _frozen(self.kernel_os))
        if self.configmap_keys is not None:
            keys = {name: tuple(sorted(set(k))) for name, k in sorted(self.configmap_keys.items())}
            object.__setattr__(self, "configmap_keys", MappingProxyType(keys))
            if self.configmaps is None:
                object.__setattr__(self, "configmaps", frozenset(keys))
        given = dict(self.os_pools) or ({self.os_tag: tag_selector(self.os_tag)} if self.os_tag else {})
        pools = {tag: _frozen(selector) for tag, selector in sorted(given.items())}
        object.__setattr__(self, "os_pools", MappingProxyType(pools))


def facts_from_nodes(
    nodes: Sequence[NodeInfo],
    *,
    namespace: str,
    precompiled: bool = False,
    has_service_monitor_crd: bool = False,
    nfd_installed: bool = False,
    kubernetes_version: str = "",
    configmaps: Iterable[str] | None = None,
    secrets: Iterable[str] | None = None,
    configmap_keys: Mapping[str, Iterable[str]] | None = None,
) -> ClusterFacts:
    """Facts from the Node list. ``precompiled`` makes a kernel shared by two OSes an error, as upstream."""
    gpu_nodes = [n for n in nodes if n.gpu]
    # Upstream takes the OS of the first GPU node in list order; sort by age so the answer is stable.
    first = min(gpu_nodes, key=lambda n: (n.creation, n.name), default=None)
    kernel_os: dict[str, str] = {}
    os_pools: dict[str, dict[str, str]] = {}
    for node in sorted(gpu_nodes, key=lambda n: n.name):
        if node.os_tag is not None:
            os_pools.setdefault(node.os_tag, os_selector(node.labels))
        kernel, tag = node.kernel, node.os_tag
        if kernel is None or tag is None:
            continue
        if precompiled and kernel_os.get(kernel, tag) != tag:
            raise RenderError(
                f"kernel {kernel} runs on two operating systems ({kernel_os[kernel]} and {tag}): "
                "precompiled driver images are chosen by kernel, so the pool would be ambiguous"
            )
        kernel_os.setdefault(kernel, tag)
    return ClusterFacts(
        namespace=namespace,
        gpu_node_count=len(gpu_nodes),
        has_nfd_labels=any(k.startswith(NFD_PREFIX) for n in nodes for k in n.labels),
        runtime=detect_runtime(nodes),
        os_tag=first.os_tag if first is not None else None,
        os_pools=os_pools,
        kernel_os=kernel_os,
        has_service_monitor_crd=has_service_monitor_crd,
        nfd_installed=nfd_installed,
        kubernetes_version=kubernetes_version,
        configmaps=frozenset(configmaps) if configmaps is not None else None,
        secrets=frozenset(secrets) if secrets is not None else None,
        configmap_keys={n: tuple(k) for n, k in configmap_keys.items()} if configmap_keys is not None else None,
    )


@dataclass(frozen=True, kw_only=True)
class OperatorSettings:
    """Settings of the operator process that shape operand manifests.

    ``agent_image`` is the image every operand runs (``gpu-operator agent NAME``) unless the policy
    names another; ``image_env`` holds upstream's ``*_IMAGE`` variables, used when a section names no
    image; ``operator_selector`` selects the operator's pods for its metrics Service.
    """

    agent_image: str = DEFAULT_AGENT_IMAGE
    image_env: Mapping[str, str] = field(default_factory=dict)
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    operator_selector: Mapping[str, str] = field(default_factory=lambda: {"app": "gpu-operator"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_env", _frozen(self.image_env))
        object.__setattr__(self, "operator_selector", _frozen(self.operator_selector))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """Settings from the operator pod's environment (``AGENT_IMAGE`` and the ``*_IMAGE`` overrides)."""
        overrides = {name: environ[name] for name in IMAGE_ENV_VARS if environ.get(name)}
        return cls(agent_image=environ.get(AGENT_IMAGE_ENV) or DEFAULT_AGENT_IMAGE, image_env=overrides)
