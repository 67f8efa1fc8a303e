"""GFD label computation for whole GPUs, MIG single/mixed, sharing, and stale-label removal."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_operator.agents.gfd.labels import NodeView, compute_labels, family, sanitise, stale_keys
from gpu_operator.agents.gfd.vgpu import VgpuInfo
from tests.unit.gpu_fixtures import gpu, mig_device


def _view(**kw: object) -> NodeView:
    base: dict[str, object] = {
        "devices": [gpu(i) for i in range(8)],
        "mig": {},
        "driver_version": "550.107.02",
        "cuda_version": (12, 4),
        "machine": "DGX H100",
        "timestamp": 1724632719,
    }
    base.update(kw)
    return NodeView(**base)  # type: ignore[arg-type]


def test_whole_gpu_labels() -> None:
    labels = compute_labels(_view())
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/cuda.driver-version.full": "550.107.02",
        "nvidia.com/cuda.driver-version.revision": "02",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gfd.timestamp": "1724632719",
    }
    assert expected.items() <= labels.items()
    assert compute_labels(_view(devices=[])) == {"nvidia.com/gfd.timestamp": "1724632719"}  # and vGPU, if read


def test_shared_product_suffix_and_rename() -> None:
    shared = compute_labels(_view(sharing_mode="time-slicing", replicas=4))
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert shared["nvidia.com/gpu.replicas"] == "4"
    assert shared["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    renamed = compute_labels(_view(sharing_mode="time-slicing", replicas=4, renamed=True))
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    mps = compute_labels(_view(sharing_mode="mps", replicas=2))
    assert mps["nvidia.com/mps.capable"] == "true"


def test_mig_single_and_mixed() -> None:
    devices = [gpu(0, mig=True), gpu(1, mig=True)]
    mig = {0: [mig_device(0, 0), mig_device(0, 1)], 1: [mig_device(1, 0)]}
    single = compute_labels(_view(devices=devices, mig=mig, mig_strategy="single"))
    assert single["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert single["nvidia.com/gpu.count"] == "3"
    assert single["nvidia.com/gpu.memory"] == "9984"
    assert "nvidia.com/gpu.slices.gi" not in single  # the backend gave no MIG attributes: left out
    assert single["nvidia.com/mig.strategy"] == "single"
    mixed_mig = {0: [mig_device(0, 0), mig_device(0, 1, "3g.40gb", 40192)], 1: [mig_device(1, 0)]}
    mixed = compute_labels(_view(devices=devices, mig=mixed_mig, mig_strategy="mixed"))
    assert mixed["nvidia.com/mig-1g.10gb.count"] == "2"
    assert mixed["nvidia.com/mig-3g.40gb.memory"] == "40192"
    assert mixed["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"
    assert mixed["nvidia.com/gpu.replicas"] == "0"
    invalid = compute_labels(_view(devices=devices, mig=mixed_mig, mig_strategy="single"))
    assert invalid["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert invalid["nvidia.com/gpu.count"] == "0"


@pytest.mark.parametrize(
    ("cc", "name"),
    [
        ((7, 0), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((4, 0), "undefined"),
    ],
)
def test_family(cc: tuple[int, int], name: str) -> None:
    assert family(*cc) == name


def test_sanitise_and_stale() -> None:
    assert sanitise("Tesla T4 (rev a1)") == "Tesla-T4-rev-a1"
    before = compute_labels(_view(devices=[gpu(0, mig=True)], mig={0: [mig_device(0, 0)]}, mig_strategy="mixed"))
    current = {
        **before,
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.present": "true",
        # The discovery agent's label (no NFD): GFD removing it made the operator drop every operand
        # from a real GPU node a minute after GFD first ran.
        "nvidia.com/gpu.discovered": "true",
        "kubernetes.io/os": "linux",
    }
    after = compute_labels(_view(devices=[gpu(0)], mig={}, mig_strategy="mixed"))
    assert stale_keys(current=current, computed=after) == sorted(k for k in before if k.startswith("nvidia.com/mig-"))


def test_mig_enabled_model_unshared_and_overwritten_by_whole_gpus() -> None:
    """mig-strategy.go newGPULabelers: MIG-enabled GPUs get replicas 0 in every strategy; whole GPUs of
    another model overwrite them (mig-strategy_test.go "sharing is not applied to ... MIG device")."""
    mig_only = compute_labels(_view(devices=[gpu(0, mig=True)], mig={0: [mig_device(0, 0)]}))
    assert mig_only["nvidia.com/gpu.replicas"] == "0"
    assert "nvidia.com/mig.strategy" not in mig_only
    devices = [gpu(0, mig=True), gpu(1, name="NVIDIA L4"), gpu(2, name="NVIDIA L4")]
    mixed = compute_labels(_view(devices=devices, mig={0: [mig_device(0, 0)]}, mig_strategy="mixed"))
    assert mixed["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert mixed["nvidia.com/gpu.count"] == "2"
    assert mixed["nvidia.com/gpu.replicas"] == "1"
    assert mixed["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    no_migs = compute_labels(_view(devices=[gpu(0)], mig={}, mig_strategy="single"))
    assert no_migs["nvidia.com/mig.strategy"] == "single"
    assert no_migs["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ([0x030200, 0x030200], "compute"),
        ([0x030000], "graphics"),
        ([0x068000], "unknown"),
        ([0x030000, 0x030200], "unknown"),
        ([0x030200, None], "unknown"),
    ],
)
def test_gpu_mode(classes: list[int | None], mode: str) -> None:
    """nvml.go newGPUModeLabeler / nvml_test.go TestGPUModeLabeler."""
    devices = [replace(gpu(i), pci_class=c) for i, c in enumerate(classes)]
    assert compute_labels(_view(devices=devices))["nvidia.com/gpu.mode"] == mode


def test_clique_only_when_unique() -> None:
    """imex.go: the label only when every fabric-attached GPU names one cluster and one clique."""
    cluster = "4a1b2c3d-0000-1111-2222-333344445555"
    same = [replace(gpu(i), fabric_clique=f"{cluster}.7") for i in range(4)]
    assert compute_labels(_view(devices=same))["nvidia.com/gpu.clique"] == f"{cluster}.7"
    partly = [*same[:3], replace(gpu(3), fabric_clique=None)]
    assert compute_labels(_view(devices=partly))["nvidia.com/gpu.clique"] == f"{cluster}.7"
    split = [*same[:3], replace(gpu(3), fabric_clique=f"{cluster}.8")]
    assert "nvidia.com/gpu.clique" not in compute_labels(_view(devices=split))
    assert "nvidia.com/gpu.clique" not in compute_labels(_view())


def test_vgpu_labels() -> None:
    host = VgpuInfo(present=True, host_driver_version="550.54.16", host_driver_branch="r550_40")
    labels = compute_labels(_view(vgpu=host))
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r550_40"
    assert compute_labels(_view(vgpu=VgpuInfo(present=False)))["nvidia.com/vgpu.present"] == "false"
    assert not any(k.startswith("nvidia.com/vgpu.") for k in compute_labels(_view(vgpu=None)))
