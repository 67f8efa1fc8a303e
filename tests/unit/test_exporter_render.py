"""Rendering: label order and escaping, value formats, MIG instances, pods (last wins / virtual GPUs)."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_operator.agents.exporter.collector import Collector, CounterSource
from gpu_operator.agents.exporter.counters import Entity, default_counters, parse_counters
from gpu_operator.agents.exporter.render import PodRef, entity_key, render
from gpu_operator.agents.shared.promtext import format_value
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import Sample
from tests.unit.gpu_fixtures import gpu, mig_device


def sample(uuid: str, **changes: float) -> Sample:
    base = Sample(
        uuid=uuid,
        gpu_util_pct=42.5,
        mem_copy_util_pct=10.0,
        enc_util_pct=0.0,
        dec_util_pct=0.0,
        fb_used_mib=1000,
        fb_free_mib=78000,
        fb_reserved_mib=559,
        temperature_c=41.0,
        memory_temperature_c=45.0,
        power_w=120.25,
        total_energy_mj=123456789,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        pcie_replay_count=0,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def entity(index: int, **changes: float) -> Entity:
    device = gpu(index)
    return Entity(device=device, sample=sample(device.uuid, **changes), driver_version="550.54.15")


CSV = "DCGM_FI_DEV_GPU_UTIL, gauge, Util.\nDCGM_FI_DEV_FB_USED, gauge, Used.\nDCGM_FI_DRIVER_VERSION, label, d\n"


def test_labels_in_dcgm_exporter_order() -> None:
    text = render(counters=parse_counters(CSV), entities=[entity(0)], hostname="node-1")
    assert text == (
        "# HELP DCGM_FI_DEV_GPU_UTIL Util.\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-00000000-1111-2222-3333-444444444444",pci_bus_id="00000000:10:00.0",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}'
        " 42.500000\n"
        "# HELP DCGM_FI_DEV_FB_USED Used.\n"
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-00000000-1111-2222-3333-444444444444",pci_bus_id="00000000:10:00.0",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}'
        " 1000\n"
    )


def test_no_hostname_and_escaping() -> None:
    weird = Entity(
        device=dataclasses.replace(gpu(1), name='Odd "GPU"\\ \nname'),
        sample=sample(gpu(1).uuid),
        driver_version="1",
    )
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    text = render(counters=counters, entities=[weird], hostname=None)
    assert 'modelName="Odd \\"GPU\\"\\\\ \\nname"' in text
    assert "Hostname" not in text


def test_help_text_is_escaped() -> None:
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, back\\slash\n")
    assert "# HELP DCGM_FI_DEV_GPU_TEMP back\\\\slash\n" in render(counters=counters, entities=[entity(0)], hostname="")


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), (True, "1"), (0.5, "0.500000"), (float("nan"), "NaN"), (float("inf"), "+Inf"), (-float("inf"), "-Inf")],
)
def test_value_formats(value: float, text: str) -> None:
    assert format_value(value) == text


def test_readings_a_gpu_cannot_give_are_left_out_never_zero() -> None:
    text = render(counters=default_counters(), entities=[entity(0)], hostname="n")
    # This sample has no GPM, NVLink, row remapping or licence readings: no series, not a made-up 0.
    for absent in (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    ):
        assert absent not in text
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in text
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in text
    assert render(counters=default_counters(), entities=[], hostname="n") == ""


def test_profiling_values_come_from_the_gpm_reading() -> None:
    counters = parse_counters("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, t\nDCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, g\n")
    e = entity(0, profiling={"tensor_active": 0.25, "graphics_active": 0.75})  # type: ignore[arg-type]
    text = render(counters=counters, entities=[e], hostname="n")
    assert text.count(" 0.250000\n") == 1
    assert text.count(" 0.750000\n") == 1


def test_mig_instances_carry_gpu_instance_labels_and_no_utilisation() -> None:
    device = dataclasses.replace(gpu(2), mig_enabled=True)
    s = sample(device.uuid, fb_used_mib=40000, fb_reserved_mib=559)
    instances = [
        Entity(device=device, sample=s, driver_version="550.54.15", mig=mig_device(2, slot, "3g.40gb", 40192))
        for slot in (0, 1)
    ]
    text = render(counters=parse_counters(CSV), entities=instances, hostname="n")
    assert "DCGM_FI_DEV_GPU_UTIL" not in text  # unsupported under MIG (NVIDIA/dcgm-exporter#272)
    lines = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
    assert len(lines) == 2
    assert 'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",Hostname="n"' in lines[1]
    assert lines[0].endswith(f" {round(40000 * 40192 / (81559 - 559))}")
    assert entity_key(instances[1]) == "2-2"


def test_a_compute_instance_is_labelled_with_its_gpu_instance_profile() -> None:
    device = dataclasses.replace(gpu(2), mig_enabled=True)
    one_c = Entity(
        device=device,
        sample=sample(device.uuid),
        driver_version="550.54.15",
        mig=mig_device(2, 0, "1c.3g.40gb", 40192),
    )
    text = render(counters=parse_counters(CSV), entities=[one_c], hostname="n")
    assert 'GPU_I_PROFILE="3g.40gb"' in text


def test_pod_attribution_last_wins_or_every_pod_with_virtual_gpus() -> None:
    e0, e1 = entity(0), entity(1)
    pods = {
        e0.device.uuid: [
            PodRef(pod="a", namespace="ml", container="c1"),
            PodRef(pod="b", namespace="ml", container="c2"),
        ]
    }
    counters = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u\n")
    text = render(counters=counters, entities=[e0, e1], hostname="n", pods=pods)
    lines = text.splitlines()[2:]
    assert lines[0].endswith(',Hostname="n",container="c2",namespace="ml",pod="b"} 42.500000')
    assert "pod=" not in lines[1]

    virtual = render(counters=counters, entities=[e0, e1], hostname="n", pods=pods, virtual_gpus=True)
    assert [line.split("container=")[1].split(",")[0] for line in virtual.splitlines()[2:4]] == ['"c1"', '"c2"']
    assert len(virtual.splitlines()) == 2 + 3


def test_device_name_keys() -> None:
    e = entity(3)
    pods = {"nvidia3": [PodRef(pod="p", namespace="n", container="c")]}
    counters = parse_counters("DCGM_FI_DEV_GPU_UTIL, gauge, u\n")
    assert 'pod="p"' in render(counters=counters, entities=[e], hostname="h", pods=pods, id_type="device-name")
    assert 'pod="p"' not in render(counters=counters, entities=[e], hostname="h", pods=pods)


def test_compute_instances_of_one_gpu_instance_make_one_series() -> None:
    backend = SimulatedBackend(profile=node_profile("a100-mig"), seed=1, node_name="n")
    backend.set_mig_mode(0, enabled=True)
    backend.reset_gpu(0)
    created = backend.create_mig_devices(0, profiles=["1c.3g.20gb"] * 3)
    assert len({m.gi_id for m in created}) == 1
    collector = Collector(backend=backend, counters=CounterSource(path=None), pods=None, hostname="n")
    entities, keys = collector.read()
    gpu0 = [e for e in entities if e.device.index == 0]
    assert [(e.mig.gi_id if e.mig else None) for e in gpu0] == [created[0].gi_id]
    assert {keys[m.uuid] for m in created} == {f"0-{created[0].gi_id}"}
    text = render(counters=default_counters(), entities=entities, hostname="n")
    fb = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{") and 'gpu="0"' in line]
    assert len(fb) == 1
    assert 'GPU_I_PROFILE="3g.20gb"' in fb[0]
