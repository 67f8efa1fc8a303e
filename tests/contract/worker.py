"""Run one contract check against the NVML backend over the fake library, in its own process.

pynvml dlopens ``libnvidia-ml.so.1`` once per process and the dynamic loader reads LD_LIBRARY_PATH
only at process start, so each NVML check runs here, started by the test with LD_LIBRARY_PATH
pointing at the fake and FAKE_NVML_CONFIG at its config. This also keeps the test process free of
the fake, so the real-GPU tier in the same pytest run still talks to the real library.

Usage: python -m tests.contract.worker CHECK PROFILE   (exit status 0: the check passed)
"""

from __future__ import annotations

import sys
import traceback

from tests.contract.checks import CHECKS
from tests.contract.harness import FakeNvmlHarness


def main(argv: list[str]) -> int:
    check, profile = argv
    harness = FakeNvmlHarness(profile)
    try:
        CHECKS[check].run(harness)
    except Exception:  # report any failure, with its traceback, to the parent test
        traceback.print_exc()
        return 1
    finally:
        harness.backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
