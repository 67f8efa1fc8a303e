"""Print one exporter page read through NVML (over the fake library): ``python -m tests.contract.exporter_scrape``.

Two collections, as a running exporter makes them: GPM metrics compare two GPM samples, so they
appear from the second on. Run in a process of its own (pynvml binds the library once per process).
"""

from __future__ import annotations

import asyncio
import sys

from gpu_operator.agents.exporter.collector import Collector, CounterSource
from gpu_operator.gpu.nvml import NvmlBackend
from gpu_operator.gpu.telemetry import GPM_MIN_INTERVAL_S


async def scrape() -> str:
    backend = NvmlBackend()
    try:
        collector = Collector(backend=backend, counters=CounterSource(path=None), pods=None, hostname="node")
        await collector.collect()
        await asyncio.sleep(GPM_MIN_INTERVAL_S)  # GPM samples are compared only this far apart
        await collector.collect()
        return collector.page.body.decode()
    finally:
        backend.close()


if __name__ == "__main__":
    sys.stdout.write(asyncio.run(scrape()))
