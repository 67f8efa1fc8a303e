"""Choosing a backend, and what importing the GPU package costs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_operator.gpu import open_backend
from gpu_operator.gpu.catalog import node_profile
from tests.conftest import REPO


def test_simulated_by_profile_name_or_object() -> None:
    by_name = open_backend("simulated", profile="pcie-t4", seed=3, node_name="a")
    by_object = open_backend("simulated", profile=node_profile("pcie-t4"), seed=3, node_name="a")
    assert by_name.name == "simulated"
    assert by_name.devices() == by_object.devices()


def test_null_and_unknown_kinds() -> None:
    assert open_backend("null").devices() == []
    with pytest.raises(
        ValueError, match="unknown GPU backend kind 'cuda'; expected one of auto, nvml, simulated, null"
    ):
        open_backend("cuda")


def test_importing_the_package_loads_no_vendor_library() -> None:
    code = (
        "import sys\n"
        "import gpu_operator.gpu, gpu_operator.gpu.simulated, gpu_operator.gpu.null, gpu_operator.gpu.catalog\n"
        "import gpu_operator.gpu.nvml\n"
        "print('pynvml' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
