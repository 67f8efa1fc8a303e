"""Backend contract checks for compute instances: ``1c.*`` profiles make several MIG devices per GPU instance.

Each compute instance is one MIG device (what NVML's MIG device handles, the device plugin and
mig-parted count), listed with its GPU instance's ID, its own compute-instance ID and UUID, and named
``<c>c.<g>g.<mem>gb`` unless it spans its GPU instance. Over NVML this goes through
``nvmlGpuInstanceGetComputeInstanceProfileInfo``/``CreateComputeInstance`` with the smaller profile
and back through ``nvmlGpuInstanceGetComputeInstanceById`` and ``nvmlComputeInstanceGetInfo``.
Plain asserts, no pytest: the same functions run in the worker process and on real GPUs.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from gpu_operator.gpu.backend import GpuError
from tests.contract.checks import MIG_UUID, Harness, _raises


def check_mig_compute_instances(h: Harness) -> None:
    backend = h.backend
    capable = [d for d in backend.devices() if d.mig_capable]
    if not capable:
        return
    index = capable[-1].index
    if backend.set_mig_mode(index, enabled=True):
        h.reset_gpu(index)
    device = backend.devices()[index]
    assert device.mig_enabled
    assert not device.mig_pending
    # The smallest plain (attribute-free) GPU-instance profile of three or more slices: 3g.*
    gi = min((p for p in device.mig_profiles if p.slices >= 3 and p.name[-2:] == "gb"), key=lambda p: p.slices)
    one = f"1c.{gi.name}"

    created = list(backend.create_mig_devices(index, profiles=[one] * gi.slices))
    assert Counter(m.profile for m in created) == Counter({one: gi.slices}), created
    assert len({m.gi_id for m in created}) == 1, "compute instances that fit share one GPU instance"
    assert sorted(m.ci_id for m in created) == list(range(gi.slices))
    assert [m.index for m in created] == list(range(gi.slices))
    assert len({m.uuid for m in created}) == gi.slices
    assert all(MIG_UUID.match(m.uuid) for m in created)
    assert all(m.parent_index == index and m.memory_mib == gi.memory_mib for m in created)
    assert list(backend.mig_devices(index)) == created

    # One more than fits in a GPU instance opens a second one; a full-size instance names the plain profile.
    if gi.max_count >= 2:
        mixed = list(backend.create_mig_devices(index, profiles=[one] * (gi.slices + 1)))
        assert len({m.gi_id for m in mixed}) == 2
        assert Counter(m.profile for m in mixed) == Counter({one: gi.slices + 1})
        full = f"{gi.slices}c.{gi.name}"
        both = list(backend.create_mig_devices(index, profiles=[full, one]))
        assert Counter(m.profile for m in both) == Counter({gi.name: 1, one: 1})
        assert len({m.gi_id for m in both}) == 2, "a full compute instance leaves no room in its GPU instance"
        created = both

    too_big = f"{gi.slices + 1}c.{gi.name}"
    _raises(GpuError, partial(backend.create_mig_devices, index, profiles=[too_big]), "offers no")
    assert list(backend.mig_devices(index)) == created, "a refused layout leaves the old one in place"
    assert list(backend.create_mig_devices(index, profiles=[])) == []
    if backend.set_mig_mode(index, enabled=False):
        h.reset_gpu(index)
    assert list(backend.mig_devices(index)) == []
