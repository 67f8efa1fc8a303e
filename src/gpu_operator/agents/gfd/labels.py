"""GPU feature discovery labels: a pure function from what the node's GPUs report to the label set.

Label names and value rules follow upstream GFD (k8s-device-plugin ``internal/lm``, node-labels.md
§6): product names sanitised, ``-SHARED`` for replicated GPUs that keep their name, family from
compute capability, CUDA driver and runtime versions, MIG capability, ``mig.strategy`` and the
per-strategy MIG labels with the MIG devices' attributes, GPU mode from the PCI class, the NVLink
fabric clique and the vGPU labels. Nothing is assumed: a fact the backend cannot give leaves its
label out (or ``unknown`` for the mode). The writer (feature file, NodeFeature object or the Node
itself) is chosen elsewhere; this module does no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.agents.gfd.vgpu import VgpuInfo
from gpu_operator.gpu.types import Device, MigDevice
from gpu_operator.names.keys import GPU_DISCOVERED, GPU_PRESENT

PREFIX = "nvidia.com/"
_VGA_CLASS, _3D_CLASS = 0x030000, 0x030200


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """Everything the labels depend on, read once from the GPU backend and the settings."""

    devices: Sequence[Device]
    mig: Mapping[int, Sequence[MigDevice]]
    driver_version: str
    cuda_version: tuple[int, int]
    machine: str = "unknown"
    mig_strategy: str = "none"
    sharing_mode: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    renamed: bool = False  # renameByDefault: the resource is advertised as <name>.shared
    timestamp: int | None = None
    vgpu: VgpuInfo | None = None  # None: the PCI tree was not readable (no vGPU labels)


def sanitise(name: str) -> str:
    """Drop characters outside ``[A-Za-z0-9-_. ]`` and turn whitespace into ``-``."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return re.sub(r"\s+", "-", kept.strip())


def family(major: int, minor: int) -> str:
    """The architecture family upstream derives from a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell"}
    names |= {12: "blackwell", 13: "rubin"}
    return names.get(major, "undefined")


def _version_labels(view: NodeView) -> dict[str, str]:
    parts = view.driver_version.split(".")
    major, minor = parts[0], parts[1] if len(parts) > 1 else ""
    rev = parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = view.cuda_version
    return {
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": view.driver_version,
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
        "cuda.runtime-version.major": str(cuda_major),
        "cuda.runtime-version.minor": str(cuda_minor),
        "cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        "cuda.runtime.major": str(cuda_major),
        "cuda.runtime.minor": str(cuda_minor),
    }


def _sharing(view: NodeView) -> tuple[str, str]:
    if view.replicas > 1 and view.sharing_mode != "none":
        return str(view.replicas), view.sharing_mode
    return "1", "none"


def _product(*parts: str, shared: bool = False) -> str:
    return "-".join([sanitise(p) for p in parts if p] + (["SHARED"] if shared else []))


def _full_gpu_labels(view: NodeView, device: Device, count: int, *, sharing: bool) -> dict[str, str]:
    """One GPU model's labels; MIG-enabled models are not shared (replicas 0), as upstream."""
    replicas, strategy = _sharing(view) if sharing else ("0", "none")
    labels = {
        "gpu.product": _product(device.name, shared=int(replicas) > 1 and not view.renamed),
        "gpu.count": str(count),
        "gpu.replicas": replicas,
        "gpu.sharing-strategy": strategy,
    }
    if device.memory_mib:
        labels["gpu.memory"] = str(device.memory_mib)
    major, minor = device.compute_capability
    if major:
        labels |= {"gpu.family": family(major, minor), "gpu.compute.major": str(major), "gpu.compute.minor": str(minor)}
    return labels


def _gpu_labels(view: NodeView) -> dict[str, str]:
    """Per-model labels under the one ``nvidia.com/gpu`` name. On a node with several models upstream
    writes each model's set over the last (MIG-enabled models first, whole GPUs over them) in Go map
    order; here the order is fixed so that the model of the lowest-index GPU of each kind wins."""
    counts = Counter(d.name for d in view.devices)
    out: dict[str, str] = {}
    for enabled in (True, False):
        first: dict[str, Device] = {}
        for d in view.devices:
            if d.mig_enabled is enabled:
                first.setdefault(d.name, d)
        for name, device in reversed(first.items()):  # the first model goes last: its labels stay
            out |= _full_gpu_labels(view, device, counts[name], sharing=not enabled)
    return out


def mig_name(profile: str) -> str:
    """The resource and label name of a MIG profile: ``1g.10gb+me`` -> ``1g.10gb.me``."""
    return profile.replace("+", ".")


def _mig_resource_labels(prefix: str, parent: Device, mig: MigDevice, count: int, view: NodeView) -> dict[str, str]:
    replicas, strategy = _sharing(view)
    shared = replicas != "1" and not view.renamed
    labels = {
        f"{prefix}product": _product(parent.name, "MIG", mig_name(mig.profile), shared=shared),
        f"{prefix}count": str(count),
        f"{prefix}replicas": replicas,
        f"{prefix}sharing-strategy": strategy,
        f"{prefix}memory": str(mig.memory_mib),
    }
    a = mig.attributes
    if a is not None:  # NVML without nvmlDeviceGetAttributes: these are left out, not guessed
        values = {"multiprocessors": a.multiprocessors, "slices.gi": a.gi_slices, "slices.ci": a.ci_slices}
        values |= {"engines.copy": a.copy_engines, "engines.decoder": a.decoders, "engines.encoder": a.encoders}
        values |= {"engines.jpeg": a.jpegs, "engines.ofa": a.ofas}
        labels |= {prefix + k: str(v) for k, v in values.items()}
    return labels


def _invalid_single(device: Device) -> dict[str, str]:
    name = _product(device.name, "MIG", "INVALID")
    return {"gpu.product": name, "gpu.count": "0", "gpu.replicas": "0", "gpu.sharing-strategy": "", "gpu.memory": "0"}


def _mig_labels(view: NodeView) -> dict[str, str]:
    """``mig.strategy`` and the MIG resources' labels (nothing for the ``none`` strategy)."""
    if view.mig_strategy == "none":
        return {}
    out = {"mig.strategy": view.mig_strategy}
    enabled = [d for d in view.devices if d.mig_enabled]
    by_index = {d.index: d for d in enabled}
    migs = [m for d in enabled for m in view.mig.get(d.index, ())]
    groups: dict[str, list[MigDevice]] = {}
    for m in migs:
        groups.setdefault(mig_name(m.profile), []).append(m)
    if view.mig_strategy == "single":
        if not enabled:
            return out
        if any(not view.mig.get(d.index) for d in enabled) or len(enabled) != len(view.devices) or len(groups) != 1:
            return out | _invalid_single(enabled[0])
        ((first, *_),) = groups.values()
        return out | _mig_resource_labels("gpu.", by_index[first.parent_index], first, len(migs), view)
    for name, group in groups.items():
        out |= _mig_resource_labels(f"mig-{name}.", by_index[group[0].parent_index], group[0], len(group), view)
    return out


def gpu_mode(classes: Sequence[int | None]) -> str:
    """``compute`` (3D controller), ``graphics`` (VGA) or ``unknown`` (unknown or differing classes)."""
    if not classes or None in classes or len(set(classes)) != 1:
        return "unknown"
    return {_VGA_CLASS: "graphics", _3D_CLASS: "compute"}.get(classes[0] or 0, "unknown")


def _clique_labels(devices: Sequence[Device]) -> dict[str, str]:
    """``gpu.clique`` when every fabric-attached GPU names the same cluster and clique."""
    ids = [d.fabric_clique.rsplit(".", 1) for d in devices if d.fabric_clique]
    clusters, cliques = {c for c, _ in ids}, {q for _, q in ids}
    if len(clusters) != 1 or len(cliques) != 1:
        return {}
    return {"gpu.clique": f"{clusters.pop()}.{cliques.pop()}"}


def _vgpu_labels(vgpu: VgpuInfo | None) -> dict[str, str]:
    if vgpu is None:  # the PCI tree could not be read: upstream writes no vGPU label
        return {}
    labels = {"vgpu.present": "true" if vgpu.present else "false"}
    if vgpu.present and vgpu.host_driver_version:
        labels |= {"vgpu.host-driver-version": vgpu.host_driver_version}
        labels |= {"vgpu.host-driver-branch": vgpu.host_driver_branch}
    return labels


def compute_labels(view: NodeView) -> dict[str, str]:
    """The complete GFD label set (keys with the ``nvidia.com/`` prefix).

    Without GPUs only the timestamp and the vGPU labels remain, as upstream.
    """
    labels: dict[str, str] = {} if view.timestamp is None else {"gfd.timestamp": str(view.timestamp)}
    labels |= _vgpu_labels(view.vgpu)
    if view.devices:
        labels |= {
            "gpu.machine": sanitise(view.machine) or "unknown",
            "mig.capable": "true" if any(d.mig_capable for d in view.devices) else "false",
            "mps.capable": "true"
            if view.sharing_mode == "mps" and not any(d.mig_enabled for d in view.devices)
            else "false",
            "gpu.mode": gpu_mode([d.pci_class for d in view.devices]),
        }
        labels |= _version_labels(view)
        labels |= _gpu_labels(view)
        labels |= _mig_labels(view)
        labels |= _clique_labels(view.devices)
    return {PREFIX + k: v for k, v in labels.items()}


def stale_keys(*, current: Mapping[str, str], computed: Mapping[str, str]) -> list[str]:
    """GFD-owned labels on the node that the hardware no longer justifies (to remove)."""
    owned = ("gpu.", "mig-", "cuda.", "mig.capable", "mps.capable", "vgpu.", "gfd.")
    return sorted(
        k
        for k in current
        if k.startswith(PREFIX)
        and k[len(PREFIX) :].startswith(owned)
        and k not in computed
        and k not in _OTHER_WRITERS
        and not k.startswith((PREFIX + "gpu.deploy.", PREFIX + "gpu.workload"))
    )


#: Labels in GFD's ``gpu.`` family that other writers own: the operator's and the discovery agent's.
_OTHER_WRITERS = frozenset({GPU_PRESENT, GPU_DISCOVERED})
