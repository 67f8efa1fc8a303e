"""Contract checks for the identity facts GFD labels from: PCI class, fabric clique, MIG attributes.

Every backend must report, for a known node, the catalog's PCI class for each GPU, no fabric clique
(none of the catalog's nodes is on a multi-node NVLink fabric; NVSwitch nodes register with an
all-zero cluster UUID), and for every MIG device it creates the attributes NVML's
``nvmlDeviceGetAttributes`` gives: its GPU instance's slices, engines and multiprocessors.
On real hardware only the invariants are checked. Plain asserts, no pytest (see ``checks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.contract.checks import Harness

GPU_CLASSES = {0x030000, 0x030200}


def check_identity(h: Harness) -> None:
    devices = list(h.backend.devices())
    for d in devices:
        assert d.pci_class is None or d.pci_class in GPU_CLASSES, hex(d.pci_class or 0)
        if d.fabric_clique is not None:
            cluster, _, clique = d.fabric_clique.rpartition(".")
            assert len(cluster) == 36, d.fabric_clique
            assert clique.isdigit(), d.fabric_clique
    if h.expected:
        want = {e.uuid: (e.pci_class, e.fabric_clique) for e in h.expected.devices}
        assert {d.uuid: (d.pci_class, d.fabric_clique) for d in devices} == want


def check_mig_attributes(h: Harness) -> None:
    """Attributes of MIG devices that exist (created by the ``mig`` check or by hand on real GPUs)."""
    for d in h.backend.devices():
        if not d.mig_enabled:
            continue
        by_name = {p.name: p for p in d.mig_profiles}
        for m in h.backend.mig_devices(d.index):
            a = m.attributes
            if a is None:
                continue  # the driver cannot say: GFD leaves the labels out
            assert 0 < a.ci_slices <= a.gi_slices, (m.profile, a)
            assert a.multiprocessors > 0, (m.profile, a)
            profile = by_name.get(m.profile)
            if profile is not None:  # a GPU instance spanned by its compute instance
                assert a.gi_slices == a.ci_slices == profile.slices, (m.profile, a)
                assert a.multiprocessors == profile.multiprocessors, (m.profile, a)
                engines = (a.copy_engines, a.decoders, a.encoders, a.jpegs, a.ofas)
                assert engines == (profile.copy_engines, profile.decoders, profile.encoders, profile.jpegs,
                                   profile.ofas), (m.profile, a)  # fmt: skip


def check_created_mig_attributes(h: Harness) -> None:
    """Create one of each plain profile's smallest device on the first MIG GPU and check its attributes."""
    devices = [d for d in h.backend.devices() if d.mig_capable]
    if not devices or h.expected is None:
        return
    d = devices[0]
    if h.backend.set_mig_mode(d.index, enabled=True):
        h.reset_gpu(d.index)
    smallest = min(d.mig_profiles, key=lambda p: (p.slices, p.memory_mib, p.nvml_profile))
    created = list(h.backend.create_mig_devices(d.index, profiles=[smallest.name]))
    assert created, "no MIG device created"
    listed = list(h.backend.mig_devices(d.index))
    assert [m.attributes for m in created] == [m.attributes for m in listed]
    a = listed[0].attributes
    assert a is not None, "the backend must report MIG attributes"
    assert (a.gi_slices, a.ci_slices, a.multiprocessors) == (smallest.slices, smallest.slices, smallest.multiprocessors)
    check_mig_attributes(h)
    h.backend.create_mig_devices(d.index, profiles=[])
    if h.backend.set_mig_mode(d.index, enabled=False):
        h.reset_gpu(d.index)
