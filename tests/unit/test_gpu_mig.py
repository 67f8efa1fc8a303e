"""MIG naming and layout validation shared by the simulated and NVML backends."""

from __future__ import annotations

import re

import pytest

from gpu_operator.gpu.backend import GpuError
from gpu_operator.gpu.catalog import GPU_MODELS
from gpu_operator.gpu.mig import (
    canonical_profile,
    device_profile,
    plan_geometry,
    profile_name,
    split_profile,
    validate_geometry,
)

A100 = GPU_MODELS["a100-sxm4-40gb"].mig_profiles


@pytest.mark.parametrize(
    ("slices", "memory", "total", "nvml_profile", "name"),
    [
        (1, 9984, 81559, 0, "1g.10gb"),  # H100: an eighth of 80 GB
        (1, 9984, 81559, 7, "1g.10gb+me"),
        (7, 80896, 81559, 4, "7g.80gb"),
        (3, 71424, 143771, 2, "3g.71gb"),  # H200: 70.5 rounds up, not to the even 70
        (1, 4864, 40960, 0xD, "1g.5gb-me"),
    ],
)
def test_profile_names(slices: int, memory: int, total: int, nvml_profile: int, name: str) -> None:
    assert profile_name(slices=slices, memory_mib=memory, total_memory_mib=total, nvml_profile=nvml_profile) == name


def test_a_fitting_layout_comes_back_largest_first() -> None:
    chosen = validate_geometry(available=A100, requested=["1g.5gb", "3g.20gb", "1g.5gb", "2g.10gb"], gpu="GPU 0")
    assert [p.name for p in chosen] == ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    assert validate_geometry(available=A100, requested=[], gpu="GPU 0") == []
    assert len(validate_geometry(available=A100, requested=["1g.5gb"] * 7, gpu="GPU 0")) == 7


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        (["1g.6gb"], "GPU 3: unknown MIG profile '1g.6gb'; this GPU offers 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb"),
        (["7g.40gb", "7g.40gb"], "GPU 3: 2 x 7g.40gb requested, at most 1 fit"),
        (["4g.20gb", "3g.20gb", "1g.5gb"], "GPU 3: 4g.20gb + 3g.20gb + 1g.5gb needs 8 compute slices, the GPU has 7"),
        (["1g.10gb"] * 4 + ["1g.5gb"], "GPU 3: 1g.10gb + 1g.10gb + 1g.10gb + 1g.10gb + 1g.5gb needs 44288 MiB"),
    ],
)
def test_layouts_that_cannot_fit_are_refused_with_the_reason(requested: list[str], message: str) -> None:
    with pytest.raises(GpuError, match="^" + re.escape(message)):
        validate_geometry(available=A100, requested=requested, gpu="GPU 3")


def test_no_profiles_at_all() -> None:
    with pytest.raises(GpuError, match="no MIG profiles are known"):
        validate_geometry(available=(), requested=["1g.5gb"], gpu="GPU 0")


@pytest.mark.parametrize(
    ("requested", "instances"),
    [
        (["1c.3g.20gb"] * 3, [("3g.20gb", (1, 1, 1))]),  # as many compute instances in one GPU instance as fit
        (["1c.3g.20gb"] * 4, [("3g.20gb", (1, 1, 1)), ("3g.20gb", (1,))]),
        (["1c.3g.20gb", "3g.20gb", "2c.3g.20gb"], [("3g.20gb", (3,)), ("3g.20gb", (2, 1))]),
        (["1c.7g.40gb"] * 7, [("7g.40gb", (1,) * 7)]),
        (["1g.5gb", "1c.2g.10gb", "1c.2g.10gb"], [("2g.10gb", (1, 1)), ("1g.5gb", (1,))]),
    ],
)
def test_compute_instance_profiles_pack_like_mig_parted(requested: list[str], instances: list[object]) -> None:
    plans = plan_geometry(available=A100, requested=requested, gpu="GPU 0")
    assert [(p.profile.name, p.compute) for p in plans] == instances


def test_compute_instance_names() -> None:
    assert split_profile("1c.3g.40gb") == (1, "3g.40gb")
    assert split_profile("3c.3g.40gb") == (None, "3g.40gb")
    assert split_profile("1g.10gb+me") == (None, "1g.10gb+me")
    assert canonical_profile("7c.7g.80gb") == "7g.80gb"
    three = next(p for p in A100 if p.name == "3g.20gb")
    assert [device_profile(compute=c, gi=three) for c in (1, 2, 3)] == ["1c.3g.20gb", "2c.3g.20gb", "3g.20gb"]


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        (["3c.4g.20gb"], "GPU 1: 3c.4g.20gb: a 4-slice GPU instance offers no 3-slice compute instance"),
        (["1c.3g.21gb"], "GPU 1: unknown MIG profile '3g.21gb'"),
        (["1c.3g.20gb"] * 7, "GPU 1: 3 x 3g.20gb requested, at most 2 fit"),
    ],
)
def test_compute_instance_layouts_that_cannot_be_made(requested: list[str], message: str) -> None:
    with pytest.raises(GpuError, match="^" + re.escape(message)):
        plan_geometry(available=A100, requested=requested, gpu="GPU 1")
