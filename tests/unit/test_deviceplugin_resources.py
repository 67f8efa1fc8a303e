"""MIG strategies, sharing, Allocate responses and preferred allocation, on hand-built devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_operator.agents.deviceplugin import allocation, mps
from gpu_operator.agents.deviceplugin.allocation import (
    AllocationError,
    Topology,
    preferred_allocation,
    preferred_gpus,
)
from gpu_operator.agents.deviceplugin.response import RequestError, allocate
from gpu_operator.agents.shared.pluginconfig import Settings, parse_config
from gpu_operator.agents.shared.resources import (
    LayoutError,
    build_resources,
    mig_resource_name,
    socket_name,
)
from tests.unit.gpu_fixtures import gpu, mig_device, nvswitch_links, pcie_links


def _settings(text: str = "", **env: str) -> Settings:
    return Settings.resolve(config=parse_config(text=text, source="t"), env=env)


def test_whole_gpus_without_mig() -> None:
    devices = [gpu(i) for i in range(8)]
    (res,) = build_resources(devices=devices, mig={}, settings=_settings())
    assert res.name == "nvidia.com/gpu"
    assert [d.id for d in res.devices] == [d.uuid for d in devices]
    assert socket_name(res.name) == "nvidia-gpu.sock"


def test_mig_single_and_mixed() -> None:
    devices = [gpu(0, mig=True), gpu(1, mig=True)]
    mig = {0: [mig_device(0, 0), mig_device(0, 1)], 1: [mig_device(1, 0)]}
    (single,) = build_resources(devices=devices, mig=mig, settings=_settings(MIG_STRATEGY="single"))
    assert single.name == "nvidia.com/gpu"
    assert [d.index_id for d in single.devices] == ["0:0", "0:1", "1:0"]
    mixed_mig = {0: [mig_device(0, 0), mig_device(0, 1, "3g.40gb", 40192)], 1: [mig_device(1, 0)]}
    names = [r.name for r in build_resources(devices=devices, mig=mixed_mig, settings=_settings(MIG_STRATEGY="mixed"))]
    assert names == ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    # With strategy none, MIG-enabled GPUs are exposed whole.
    (whole,) = build_resources(devices=devices, mig=mig, settings=_settings())
    assert len(whole.devices) == 2


@pytest.mark.parametrize(
    ("devices", "mig", "message"),
    [
        ([gpu(0, mig=True), gpu(1)], {0: [mig_device(0, 0)]}, "same migEnabled value"),
        ([gpu(0, mig=True)], {0: [mig_device(0, 0), mig_device(0, 1, "2g.20gb")]}, "more than one MIG device type"),
        ([gpu(0, mig=True)], {}, "at least one MIG device"),
    ],
)
def test_invalid_single_layouts(devices: list, mig: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(LayoutError, match=message):
        build_resources(devices=devices, mig=mig, settings=_settings(MIG_STRATEGY="single"))


def test_time_slicing_replicas_and_rename() -> None:
    text = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}"
    (res,) = build_resources(devices=[gpu(0), gpu(1)], mig={}, settings=_settings(text))
    assert len(res.devices) == 6
    assert res.devices[1].id == f"{gpu(0).uuid}::1"
    renamed = "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
    (res,) = build_resources(devices=[gpu(0)], mig={}, settings=_settings(renamed))
    assert res.name == "nvidia.com/gpu.shared"
    wrong = "sharing: {timeSlicing: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}"
    with pytest.raises(LayoutError, match="does not advertise"):
        build_resources(devices=[gpu(0)], mig={}, settings=_settings(wrong))


def test_allocate_strategies() -> None:
    settings = _settings("flags: {plugin: {deviceListStrategy: [envvar, cdi-annotations, cdi-cri]}}")
    (res,) = build_resources(devices=[gpu(0), gpu(1)], mig={}, settings=settings)
    known = {d.id: d for d in res.devices}
    out = allocate(settings=settings, resource=res.name, known=known, requested=[gpu(1).uuid], response_id="x")
    assert out.envs["NVIDIA_VISIBLE_DEVICES"] == gpu(1).uuid
    assert out.cdi_devices == [f"k8s.device-plugin.nvidia.com/gpu={gpu(1).uuid}"]
    assert out.annotations == {"cdi.k8s.io/nvidia-device-plugin_x": f"k8s.device-plugin.nvidia.com/gpu={gpu(1).uuid}"}
    by_index = _settings(DEVICE_ID_STRATEGY="index", DEVICE_LIST_STRATEGY="volume-mounts", PASS_DEVICE_SPECS="true")
    out = allocate(settings=by_index, resource=res.name, known=known, requested=[gpu(0).uuid, gpu(1).uuid])
    assert out.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert [m.container_path for m in out.mounts] == [
        "/var/run/nvidia-container-devices/0",
        "/var/run/nvidia-container-devices/1",
    ]
    assert "/dev/nvidia1" in [d.container_path for d in out.devices]
    with pytest.raises(RequestError, match="unknown device"):
        allocate(settings=settings, resource=res.name, known=known, requested=["GPU-nope"])


def test_shared_requests_and_mps() -> None:
    text = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\nflags: {mpsRoot: /run/nvidia/mps}"
    settings = _settings(text)
    (res,) = build_resources(devices=[gpu(0)], mig={}, settings=settings)
    known = {d.id: d for d in res.devices}
    with pytest.raises(RequestError, match="maximum request size for shared resources is 1; found 2"):
        allocate(settings=settings, resource=res.name, known=known, requested=list(known))
    out = allocate(settings=settings, resource=res.name, known=known, requested=[res.devices[0].id])
    assert out.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert out.envs["NVIDIA_VISIBLE_DEVICES"] == gpu(0).uuid
    with pytest.raises(LayoutError, match="MPS sharing does not support MIG"):
        build_resources(
            devices=[gpu(0, mig=True)], mig={0: [mig_device(0, 0)]}, settings=_settings(text, MIG_STRATEGY="single")
        )


def test_preferred_gpus_on_nvswitch_and_pcie() -> None:
    nvs = Topology.from_links(nvswitch_links(8))
    assert preferred_gpus(nvs, available=list(range(8)), required=[], size=2) == [0, 1]
    pcie = Topology.from_links(pcie_links(16))
    # Pairs on one switch beat anything else; quads under one host bridge next.
    assert preferred_gpus(pcie, available=[0, 2, 3, 5, 9], required=[], size=2) == [2, 3]
    assert preferred_gpus(pcie, available=list(range(16)), required=[5], size=4) == [4, 5, 6, 7]
    assert preferred_gpus(pcie, available=list(range(16)), required=[], size=8) in (
        [0, 1, 2, 3, 4, 5, 6, 7],
        list(range(8, 16)),
    )
    assert preferred_gpus(pcie, available=[1, 2], required=[3], size=2) == []
    assert preferred_gpus(pcie, available=[1, 2], required=[], size=3) == []


def test_heuristic_matches_exhaustive_on_pcie_tree() -> None:
    pcie = Topology.from_links(pcie_links(16))
    available = [0, 1, 3, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15]
    for size in range(2, 9):
        fast = allocation._best_heuristic(pcie, free=available, required=[], size=size)
        exact = allocation._best_exhaustive(pcie, free=available, required=[], size=size)
        assert pcie.set_score(fast) == pcie.set_score(exact), size


def test_replicas_distributed_and_packed() -> None:
    text = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"
    (res,) = build_resources(devices=[gpu(0), gpu(1)], mig={}, settings=_settings(text))
    devices = {d.id: d for d in res.devices}
    # GPU 0 already has two replicas handed out.
    available = [d for d in devices if not d.startswith(gpu(0).uuid + "::0") and d != f"{gpu(0).uuid}::1"]
    spread = preferred_allocation(devices=devices, topology=Topology({}), available=available, required=[], size=2)
    assert {devices[d].gpu_index for d in spread} == {1}
    packed = preferred_allocation(
        devices=devices, topology=Topology({}), available=available, required=[], size=2, policy="packed"
    )
    assert {devices[d].gpu_index for d in packed} == {0}
    with pytest.raises(AllocationError, match="not enough available devices"):
        preferred_allocation(devices=devices, topology=Topology({}), available=available[:1], required=[], size=2)
    with pytest.raises(AllocationError, match="unknown device ids"):
        preferred_allocation(devices=devices, topology=Topology({}), available=["x"], required=[], size=1)


def test_mps_shared_resources_wait_for_their_control_daemon(tmp_path: Path) -> None:
    # Handing out MPS pipe settings with no daemon behind them breaks CUDA in the container.
    text = f"sharing: {{mps: {{resources: [{{name: nvidia.com/gpu, replicas: 2}}]}}}}\nflags: {{mpsRoot: {tmp_path}}}"
    settings = _settings(text)
    resources = build_resources(devices=[gpu(0)], mig={}, settings=settings)
    serve, waiting = mps.split_ready(resources, settings)
    assert (serve, waiting) == ([], ["nvidia.com/gpu"])
    assert mps.readiness(resources, settings) == (False,)
    marker = mps.ready_marker(mps_root=str(tmp_path), resource="nvidia.com/gpu")
    marker.parent.mkdir(parents=True)
    marker.touch()
    assert mps.split_ready(resources, settings) == (resources, [])
    assert mps.readiness(resources, settings) == (True,)
    plain = build_resources(devices=[gpu(0)], mig={}, settings=_settings())
    assert mps.split_ready(plain, _settings()) == (plain, [])
