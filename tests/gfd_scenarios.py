"""GFD label scenarios shared by the unit tier (simulated backend) and the contract tier (NVML over
the fake library): put a backend's GPUs into a scenario's MIG layout and compute the labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_operator.agents.gfd.labels import compute_labels
from gpu_operator.agents.gfd.program import node_view
from gpu_operator.agents.gfd.vgpu import VgpuInfo
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.gpu.backend import GpuBackend

BARE_METAL = VgpuInfo(present=False)  # what the PCI tree of a node without vGPU gives


def gfd_labels(backend: GpuBackend, *, machine: str, strategy: str = "none") -> dict[str, str]:
    """The labels GFD computes for ``backend`` (no timestamp, no sharing, a bare-metal PCI tree)."""
    settings = Settings(mig_strategy=strategy)  # type: ignore[arg-type]  # a MigStrategy literal
    view = node_view(backend=backend, settings=settings, machine=machine, timestamp=None, vgpu=BARE_METAL)
    return compute_labels(view)


def apply_layout(backend: GpuBackend, layout: Mapping[int, Sequence[str]]) -> None:
    """Create MIG devices on GPUs whose MIG mode is already on (``layout``: GPU index -> profiles)."""
    for index, profiles in layout.items():
        backend.create_mig_devices(index, profiles=list(profiles))
