"""One CDI device naming for plugin and runtime: every ``k8s.device-plugin.nvidia.com/gpu=<id>`` an Allocate
response names (UUID or index, whole GPUs and MIG devices, shared replicas) is a device of the spec the
plugin publishes. Before, the plugin named devices of a kind nothing provided and CDI pods failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_operator.agents.deviceplugin import cdispec
from gpu_operator.agents.deviceplugin.response import CDI_KIND, allocate
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.agents.shared.resources import build_resources
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext


def _names_in_spec(spec: dict[str, object]) -> set[str]:
    devices = spec["devices"]
    assert isinstance(devices, list)
    return {f"{spec['kind']}={d['name']}" for d in devices}


def _backend(profile: str, *, mig: bool) -> SimulatedBackend:
    backend = SimulatedBackend(profile=NODE_PROFILES[profile])
    if mig:
        device = next(iter(backend.devices()))
        smallest = device.mig_profiles[0]
        backend.set_mig_mode(device.index, enabled=True)
        backend.reset_gpu(device.index)
        backend.create_mig_devices(device.index, profiles=[smallest.name] * 2)
    return backend


@pytest.mark.parametrize(
    ("profile", "mig", "id_strategy"),
    [
        ("dgx-h100", False, "uuid"),
        ("dgx-h100", False, "index"),
        ("a100-mig", True, "uuid"),
        ("a100-mig", True, "index"),
    ],
)
def test_every_device_an_allocation_names_is_in_the_published_spec(
    tmp_path: Path, profile: str, mig: bool, id_strategy: str
) -> None:
    backend = _backend(profile, mig=mig)
    settings = Settings(
        device_list_strategy=("cdi-annotations", "cdi-cri"),
        device_id_strategy=id_strategy,  # type: ignore[arg-type]
        mig_strategy="mixed" if mig else "none",
        driver_root="/run/nvidia/driver",
    )
    ctx = FakeContext(root=tmp_path, gpu=backend)
    assert cdispec.publish(ctx=ctx, backend=backend, settings=settings)
    spec = json.loads(cdispec.spec_path(ctx).read_text())
    assert spec["kind"] == CDI_KIND
    assert cdispec.spec_path(ctx).name == "k8s.device-plugin.nvidia.com-gpu.json"
    published = _names_in_spec(spec)
    devices = list(backend.devices())
    migs = {d.index: list(backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
    for resource in build_resources(devices=devices, mig=migs, settings=settings):
        known = {d.id: d for d in resource.devices}
        for device_id in known:
            response = allocate(settings=settings, resource=resource.name, known=known, requested=[device_id])
            assert response.cdi_devices, resource.name
            assert set(response.cdi_devices) <= published, (resource.name, response.cdi_devices)
    # Unchanged devices: nothing is rewritten.
    assert not cdispec.publish(ctx=ctx, backend=backend, settings=settings)


def test_no_spec_without_a_cdi_strategy(tmp_path: Path) -> None:
    backend = _backend("pcie-l4", mig=False)
    ctx = FakeContext(root=tmp_path, gpu=backend)
    assert not cdispec.publish(ctx=ctx, backend=backend, settings=Settings(device_list_strategy=("envvar",)))
    assert not cdispec.spec_path(ctx).exists()
