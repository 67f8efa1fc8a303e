"""GFD label computation for whole GPUs, MIG single/mixed, sharing, and stale-label removal."""

from __future__ import annotations

import pytest

from gpu_operator.agents.gfd.labels import NodeView, compute_labels, family, sanitise, stale_keys
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
    assert compute_labels(_view(devices=[])) == {}


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
    assert single["nvidia.com/gpu.slices.gi"] == "1"
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
