"""The GPU catalog: models, MIG profiles, node profiles and the links derived from them."""

from __future__ import annotations

import pytest

from gpu_operator.gpu.catalog import (
    GPU_MODELS,
    NODE_PROFILES,
    cuda_version_for_driver,
    gpu_model,
    node_profile,
    quantity_bytes,
)
from gpu_operator.gpu.mig import profile_name
from gpu_operator.gpu.types import LinkType


def test_the_models_the_simulated_nodes_need_are_there_with_nvml_names() -> None:
    names = {key: model.name for key, model in GPU_MODELS.items()}
    assert names == {
        "a100-sxm4-40gb": "NVIDIA A100-SXM4-40GB",
        "a100-sxm4-80gb": "NVIDIA A100-SXM4-80GB",
        "h100-sxm5-80gb": "NVIDIA H100 80GB HBM3",
        "h200-sxm-141gb": "NVIDIA H200",
        "b200": "NVIDIA B200",
        "l4": "NVIDIA L4",
        "t4": "Tesla T4",
    }
    assert {k for k, m in GPU_MODELS.items() if m.mig_capable} == {
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h200-sxm-141gb",
        "b200",
    }
    assert all(m.pci_device_id & 0xFFFF == 0x10DE for m in GPU_MODELS.values())


@pytest.mark.parametrize("key", sorted(k for k, m in GPU_MODELS.items() if m.mig_capable))
def test_mig_profile_names_follow_from_nvml_numbers(key: str) -> None:
    model = GPU_MODELS[key]
    for p in model.mig_profiles:
        derived = profile_name(
            slices=p.slices, memory_mib=p.memory_mib, total_memory_mib=model.memory_mib, nvml_profile=p.nvml_profile
        )
        assert derived == p.name
    whole = max(model.mig_profiles, key=lambda p: p.slices)
    assert whole.slices == 7
    assert whole.max_count == 1


def test_mig_profiles_of_the_a100_and_the_balanced_configs() -> None:
    a100_40 = {p.name for p in GPU_MODELS["a100-sxm4-40gb"].mig_profiles}
    assert {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"} <= a100_40
    a100_80 = {p.name for p in GPU_MODELS["a100-sxm4-80gb"].mig_profiles}
    assert {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"} <= a100_80
    assert {"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"} <= {p.name for p in GPU_MODELS["h200-sxm-141gb"].mig_profiles}
    assert {"1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"} <= {p.name for p in GPU_MODELS["b200"].mig_profiles}


def test_node_profiles_and_their_interconnects() -> None:
    assert set(NODE_PROFILES) >= {
        "dgx-h100",
        "dgx-a100",
        "hgx-h200",
        "dgx-b200",
        "pcie-l4",
        "pcie-t4",
        "a100-mig",
        "cpu-only",
    }
    dgx = node_profile("dgx-h100")
    assert (dgx.gpu_count, dgx.nvswitch, dgx.model and dgx.model.key) == (8, True, "h100-sxm5-80gb")
    links = dgx.links()
    assert len(links) == 28
    assert {(link.type, link.nvlinks) for link in links} == {(LinkType.NVLINK, 18)}
    assert {link.nvlinks for link in node_profile("dgx-a100").links()} == {12}
    l4 = {(link.a, link.b): link.type for link in node_profile("pcie-l4").links()}
    assert l4[0, 1] is LinkType.HOST_BRIDGE
    assert l4[2, 3] is LinkType.SINGLE_SWITCH
    assert l4[0, 2] is LinkType.CROSS_CPU
    cpu = node_profile("cpu-only")
    assert (cpu.gpu_count, cpu.model, cpu.links()) == (0, None, ())


def test_node_profile_facts_for_the_simulated_nodes() -> None:
    for profile in NODE_PROFILES.values():
        assert profile.cpu_cores > 0
        assert profile.memory_bytes >= 1 << 30
        assert profile.os_id
        assert profile.os_version_id
        assert profile.kernel_version
        if profile.gpu_count:
            assert profile.driver_version
            assert profile.cuda_driver_version >= (12, 0)
            assert len({profile.pci_bus_id(i) for i in range(profile.gpu_count)}) == profile.gpu_count
    assert node_profile("dgx-h100").memory_bytes == 2048 << 30


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown node profile 'dgx-z9'; known profiles: a100-mig, cpu-only"):
        node_profile("dgx-z9")
    with pytest.raises(KeyError, match=r"unknown GPU model 'v100'; known models: a100-sxm4-40gb"):
        gpu_model("v100")


def test_cuda_version_follows_the_driver_branch() -> None:
    assert cuda_version_for_driver("550.54.15") == (12, 4)
    assert cuda_version_for_driver("535.161.08") == (12, 2)
    assert cuda_version_for_driver("572.1") == (12, 8)  # between branches: the last one at or below
    assert cuda_version_for_driver("junk", default=(1, 2)) == (1, 2)
    assert cuda_version_for_driver("300.1") == (0, 0)


def test_quantities() -> None:
    assert quantity_bytes("64Gi") == 64 << 30
    assert quantity_bytes("512") == 512
    with pytest.raises(ValueError, match="not a binary quantity"):
        quantity_bytes("64GB")
