"""GFD's complete label set for the catalog's nodes equals what upstream GFD writes for them.

The expected sets (``gfd_expected``) are upstream facts; the labels are computed here from the
simulated backend, through the same ``node_view``/``compute_labels`` path as the agent. The same
scenarios run over NVML and the fake library in ``tests/contract/test_gfd_nvml.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import Device, MigDevice
from tests import gfd_scenarios
from tests.unit import gfd_expected


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[SimulatedBackend]:
    backend = SimulatedBackend(profile=node_profile(request.param), seed=3, node_name="gfd-node")
    yield backend
    backend.close()


def _mig_on(backend: SimulatedBackend) -> None:
    for d in backend.devices():
        backend.set_mig_mode(d.index, enabled=True)
        backend.reset_gpu(d.index)


@pytest.mark.parametrize("sim", ["dgx-h100"], indirect=True)
def test_dgx_h100(sim: SimulatedBackend) -> None:
    assert gfd_scenarios.gfd_labels(sim, machine="DGX H100") == gfd_expected.DGX_H100


@pytest.mark.parametrize("sim", ["pcie-l4"], indirect=True)
def test_pcie_l4(sim: SimulatedBackend) -> None:
    assert gfd_scenarios.gfd_labels(sim, machine="PowerEdge R760") == gfd_expected.PCIE_L4


@pytest.mark.parametrize("sim", ["a100-mig"], indirect=True)
def test_a100_strategy_none(sim: SimulatedBackend) -> None:
    assert gfd_scenarios.gfd_labels(sim, machine="HGX A100") == gfd_expected.A100_NONE


@pytest.mark.parametrize("sim", ["a100-mig"], indirect=True)
def test_a100_strategy_single(sim: SimulatedBackend) -> None:
    _mig_on(sim)
    gfd_scenarios.apply_layout(sim, gfd_expected.A100_SINGLE_LAYOUT)
    labels = gfd_scenarios.gfd_labels(sim, machine="HGX A100", strategy="single")
    assert labels == gfd_expected.A100_SINGLE


@pytest.mark.parametrize("sim", ["a100-mig"], indirect=True)
def test_a100_strategy_mixed(sim: SimulatedBackend) -> None:
    _mig_on(sim)
    gfd_scenarios.apply_layout(sim, gfd_expected.A100_MIXED_LAYOUT)
    labels = gfd_scenarios.gfd_labels(sim, machine="HGX A100", strategy="mixed")
    assert labels == gfd_expected.A100_MIXED


class TwoModels:
    """One node's GPUs from two simulated nodes (the first's driver), renumbered in order."""

    def __init__(self, *profiles: str) -> None:
        self.parts = [SimulatedBackend(profile=node_profile(p), seed=3, node_name="gfd-node") for p in profiles]

    def driver_version(self) -> str:
        return self.parts[0].driver_version()

    def cuda_driver_version(self) -> tuple[int, int]:
        return self.parts[0].cuda_driver_version()

    def devices(self) -> Sequence[Device]:
        found = [d for part in self.parts for d in part.devices()]
        return [replace(d, index=i) for i, d in enumerate(found)]

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        return []

    def close(self) -> None:
        for part in self.parts:
            part.close()


def test_mixed_node_two_models() -> None:
    node = TwoModels("pcie-t4", "pcie-l4")
    try:
        labels = gfd_scenarios.gfd_labels(node, machine="ProLiant DL380 Gen10")  # type: ignore[arg-type]
    finally:
        node.close()
    assert labels == gfd_expected.MIXED_NODE
