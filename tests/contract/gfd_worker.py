"""Compute GFD's labels over the NVML backend (run with the fake library; see ``test_gfd_nvml``).

Usage: python -m tests.contract.gfd_worker SCENARIO   (prints the labels as JSON)
"""

from __future__ import annotations

import json
import sys

from gpu_operator.gpu.nvml import NvmlBackend
from tests import gfd_scenarios
from tests.unit import gfd_expected

# scenario -> (machine, MIG strategy, MIG layout on GPUs whose MIG mode the config turns on)
SCENARIOS = {
    "dgx-h100": ("DGX H100", "none", {}),
    "a100-mixed": ("HGX A100", "mixed", gfd_expected.A100_MIXED_LAYOUT),
    "a100-single": ("HGX A100", "single", gfd_expected.A100_SINGLE_LAYOUT),
}


def main(argv: list[str]) -> int:
    machine, strategy, layout = SCENARIOS[argv[0]]
    backend = NvmlBackend()
    try:
        gfd_scenarios.apply_layout(backend, layout)
        print(json.dumps(gfd_scenarios.gfd_labels(backend, machine=machine, strategy=strategy), sort_keys=True))
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
