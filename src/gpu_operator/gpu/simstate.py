"""Per-GPU state of the simulated backend: identity derived from a seed, MIG state, and metrics.

Identity (UUID, serial) is a hash of (seed, node name, index), so the same node gets the same GPUs
in every run and different nodes never collide. Metrics are pure functions of the wall clock, a
per-GPU phase and the GPU's load level, except the two counters (energy, NVLink traffic) that
integrate power and traffic over the time between readings, as real counters do.

A ``SimGpu`` is created only when its GPU is first touched and holds a handful of numbers, so a
process can carry thousands of simulated nodes. Locking is the owning backend's job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

from gpu_operator.gpu import telemetry
from gpu_operator.gpu.catalog import GpuModel
from gpu_operator.gpu.types import MigDevice, Sample

_PERIOD_S = 60.0  # one slow wave per minute: visible on a dashboard, stable within one test


def digest(*parts: object) -> str:
    """A stable hex digest of ``parts`` (identity material, not security)."""
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def uuid_from(prefix: str, hexdigest: str) -> str:
    h = hexdigest
    return f"{prefix}-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimGpu:
    """Mutable state of one simulated GPU."""

    __slots__ = (
        "ecc_dbe",
        "ecc_sbe",
        "energy_mj",
        "index",
        "last_t",
        "last_xid",
        "load",
        "lost",
        "mig",
        "mig_enabled",
        "mig_generation",
        "mig_target",
        "nvlink_kib",
        "pcie_replays",
        "phase",
        "pinned",
        "serial",
        "uuid",
    )

    def __init__(self, *, seed: int, node_name: str, index: int, now: float) -> None:
        h = digest("gpu", seed, node_name, index)
        self.index = index
        self.uuid = uuid_from("GPU", h)
        self.serial = "16" + str(int(h[32:48], 16))[-11:].rjust(11, "0")
        self.phase = int(h[48:56], 16) / 0xFFFFFFFF * 2 * math.pi
        self.load = 0.0
        self.lost = False
        self.mig_enabled = False
        self.mig_target = False  # the mode after the next reset; differs from mig_enabled while pending
        self.mig: list[MigDevice] = []
        self.mig_generation = 0  # bumps on every geometry change, so recreated MIG devices get new UUIDs
        self.last_xid = 0
        self.ecc_sbe = 0
        self.ecc_dbe = 0
        self.pcie_replays = 0
        self.energy_mj = float(int(h[56:64], 16) % 10**9)  # energy since boot: boots happened at different times
        self.nvlink_kib = 0.0
        self.last_t = now
        self.pinned: dict[str, Any] = {}  # Sample attribute -> a value a test gave this GPU

    def utilisation(self, t: float) -> float:
        """Load plus a small wave, never below 0 or above 100, exactly 0 for an idle GPU."""
        amplitude = min(5.0, self.load, 100.0 - self.load)
        return max(0.0, min(100.0, self.load + amplitude * math.sin(2 * math.pi * t / _PERIOD_S + self.phase)))

    def reading(self, *, model: GpuModel, t: float) -> Sample:
        """One reading at time ``t``; advances the energy and NVLink counters to ``t``."""
        util = self.utilisation(t)
        busy = util / 100.0
        power = model.idle_w + (model.tdp_w - model.idle_w) * busy
        elapsed = max(0.0, t - self.last_t)
        self.energy_mj += power * elapsed * 1000.0
        # ~25 GB/s per link at full load; counted in KiB like DCGM's NVLink bandwidth counter.
        self.nvlink_kib += model.nvlinks * 25e9 / 1024 * busy * elapsed
        self.last_t = max(self.last_t, t)
        reserved = model.reserved_mib
        usable = model.memory_mib - reserved
        used = round(usable * (0.002 + 0.9 * busy))
        temperature = 30.0 + 45.0 * busy + 0.5 * math.sin(2 * math.pi * t / _PERIOD_S + self.phase)
        idle_sm, max_sm = model.sm_clock_mhz
        can = telemetry.telemetry_of(model)
        tx_kbps, rx_kbps = telemetry.pcie_kbps(busy)
        sample = Sample(
            uuid=self.uuid,
            gpu_util_pct=round(util, 2),
            mem_copy_util_pct=round(util * 0.6, 2),
            enc_util_pct=0.0,
            dec_util_pct=0.0,
            fb_used_mib=used,
            fb_free_mib=usable - used,
            fb_reserved_mib=reserved,
            temperature_c=round(temperature, 1),
            memory_temperature_c=round(temperature + 4.0, 1) if can.memory_sensor else None,
            power_w=round(power, 2),
            total_energy_mj=int(self.energy_mj),
            sm_clock_mhz=idle_sm if util == 0 else round(idle_sm + (max_sm - idle_sm) * min(1.0, 0.6 + busy)),
            mem_clock_mhz=model.mem_clock_mhz,
            pcie_replay_count=self.pcie_replays,
            ecc_sbe_volatile=self.ecc_sbe,
            ecc_dbe_volatile=self.ecc_dbe,
            nvlink_bandwidth_total=int(self.nvlink_kib) if can.nvlink else None,
            last_xid=self.last_xid,
            pcie_tx_bytes_per_s=tx_kbps * 1024,
            pcie_rx_bytes_per_s=rx_kbps * 1024,
            remapped_rows_correctable=0 if can.row_remapping else None,
            remapped_rows_uncorrectable=0 if can.row_remapping else None,
            row_remap_failure=0 if can.row_remapping else None,
            clock_event_reasons=telemetry.CLOCK_EVENT_GPU_IDLE if util == 0 else 0,
            profiling=telemetry.profiling(busy) if can.gpm else {},
        )
        return dataclasses.replace(sample, **self.pinned) if self.pinned else sample

    def mig_uuid(self, *, seed: int, node_name: str, gi_id: int, ci_id: int = 0) -> str:
        # The first compute instance keeps the digest a GPU instance alone had, so UUIDs stay stable.
        parts: tuple[object, ...] = (self.index, self.mig_generation, gi_id) + ((ci_id,) if ci_id else ())
        return uuid_from("MIG", digest("mig", seed, node_name, *parts))
