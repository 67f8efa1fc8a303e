"""GFD's label set over NVML and the fake library equals upstream's, as over the simulated backend.

The expected sets are ``tests/unit/gfd_expected`` (upstream facts); ``gfd_worker`` runs the label
computation in a process that loads the fake ``libnvidia-ml.so.1``. The last test proves the new
NVML calls are optional: a library without them still labels, leaving those labels out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.contract.conftest import RunPython
from tests.unit import gfd_expected

_MIG_ON = ("device.0.mig_mode=1", "device.1.mig_mode=1")
CASES = {
    "dgx-h100": ("dgx-h100", (), gfd_expected.DGX_H100),
    "a100-mixed": ("a100-mig", _MIG_ON, gfd_expected.A100_MIXED),
    "a100-single": ("a100-mig", _MIG_ON, gfd_expected.A100_SINGLE),
}


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_labels_over_nvml_equal_upstream(scenario: str, run_python: RunPython) -> None:
    profile, extra, expected = CASES[scenario]
    result = run_python("-m", "tests.contract.gfd_worker", scenario, profile=profile, extra=extra)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected


# The label each new NVML call feeds, and what it becomes without the call (upstream's rules).
_WITHOUT = {
    "nvmlDeviceGetPciInfoExt": ("nvidia.com/gpu.mode", "unknown"),
    "nvmlDeviceGetGpuFabricInfo": ("nvidia.com/gpu.clique", None),
    "nvmlDeviceGetAttributes_v2": ("nvidia.com/gpu.multiprocessors", None),
}


@pytest.mark.parametrize("symbol", sorted(_WITHOUT))
def test_new_calls_are_optional(symbol: str, run_python: RunPython, build_fake_nvml: Callable[..., Path]) -> None:
    libdir = build_fake_nvml([symbol])
    result = run_python("-m", "tests.contract.gfd_worker", "a100-single", profile="a100-mig", extra=_MIG_ON,
                        libdir=libdir)  # fmt: skip
    assert result.returncode == 0, result.stderr
    labels = json.loads(result.stdout)
    key, value = _WITHOUT[symbol]
    assert labels.get(key) == value
    rest = {k: v for k, v in gfd_expected.A100_SINGLE.items() if k in labels and k != key}
    assert rest == {k: v for k, v in labels.items() if k != key}  # nothing else changes
