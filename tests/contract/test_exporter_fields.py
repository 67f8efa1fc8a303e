"""Every default dcgm-exporter counter, measured: each field carries the value its GPU was given.

The same givens go to the simulated backend (``set_readings``, ``inject_xid``) and to the fake NVML
library (config keys, read back through the real NVML calls of ``gpu.nvml_readings``); a scrape of
each must hold every default counter with exactly that value (one test per field and backend), and
an L4 must leave out what it cannot measure (no HBM sensor, no NVLink, no row remapping, no GPM).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.exporter.collector import Collector, CounterSource
from gpu_operator.agents.exporter.counters import DEFAULT_CSV
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.contract import fakenvml
from tests.contract.harness import NODE, SEED

Series = dict[tuple[str, str], tuple[float, dict[str, str]]]  # (field, gpu) -> (value, labels)
XID = 43
POWER_W = 312.5
TEST_S = 120  # the longest a scrape may take after the config is written: the energy counter's slack


@dataclass(frozen=True)
class Given:
    """A field, what the GPU is given (simulated readings; fake config keys of device 0), the value to see."""

    name: str
    value: float
    sim: dict[str, object] = field(default_factory=dict)
    fake: tuple[str, ...] = ()
    slack: float = 0.0


GIVEN = [
    Given("DCGM_FI_DEV_SM_CLOCK", 1755, {"sm_clock_mhz": 1755}, ("sm_clock=1755",)),
    Given("DCGM_FI_DEV_MEM_CLOCK", 2600, {"mem_clock_mhz": 2600}, ("mem_clock=2600",)),
    Given("DCGM_FI_DEV_MEMORY_TEMP", 47, {"memory_temperature_c": 47.0}, ("memory_temperature=47",)),
    Given("DCGM_FI_DEV_GPU_TEMP", 52, {"temperature_c": 52.0}, ("temperature=52",)),
    Given("DCGM_FI_DEV_POWER_USAGE", POWER_W, {"power_w": POWER_W}, (f"power_mw={int(POWER_W * 1000)}",)),
    # A counter: the fake integrates power over time from the given start, so allow the test's duration.
    Given(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        9_000_000_000,
        {"total_energy_mj": 9_000_000_000},
        ("energy_mj=9000000000",),
        slack=POWER_W * 1000 * TEST_S,
    ),
    Given("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 7, {"pcie_replay_count": 7}, ("tel.pcie_replays=7",)),
    Given("DCGM_FI_DEV_GPU_UTIL", 63, {"gpu_util_pct": 63.0}, ("utilization=63",)),
    Given("DCGM_FI_DEV_MEM_COPY_UTIL", 21, {"mem_copy_util_pct": 21.0}, ("tel.mem_util=21",)),
    Given("DCGM_FI_DEV_ENC_UTIL", 5, {"enc_util_pct": 5.0}, ("tel.enc_util=5",)),
    Given("DCGM_FI_DEV_DEC_UTIL", 9, {"dec_util_pct": 9.0}, ("tel.dec_util=9",)),
    Given("DCGM_FI_DEV_XID_ERRORS", XID),  # an XID event on GPU 0, set up per backend below
    Given("DCGM_FI_DEV_FB_USED", 4096, {"fb_used_mib": 4096}, ("tel.fb_used_mib=4096",)),
    Given("DCGM_FI_DEV_FB_RESERVED", 551, {"fb_reserved_mib": 551}, ("reserved_mib=551",)),
    Given("DCGM_FI_DEV_FB_FREE", 81559 - 551 - 4096, {"fb_free_mib": 81559 - 551 - 4096}, ("memory_mib=81559",)),
    Given("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 3000, {"nvlink_bandwidth_total": 3000}, ("tel.nvlink_kib=1000,2000",)),
    Given(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        1,
        {"vgpu_license_status": 1},
        ("tel.virtualization_mode=2", "tel.vgpu_licensed=1"),
    ),
    Given("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1, {"remapped_rows_uncorrectable": 1}),
    Given("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 3, {"remapped_rows_correctable": 3}),
    Given("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, {"row_remap_failure": 1}, ("tel.remapped_rows=3,1,0,1",)),
    Given("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.55, {}, ("tel.gpm.1=55",)),
    Given("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.2, {}, ("tel.gpm.5=20",)),
    Given("DCGM_FI_PROF_DRAM_ACTIVE", 0.33, {}, ("tel.gpm.10=33",)),
    Given("DCGM_FI_PROF_PCIE_TX_BYTES", 1000 * 1024, {"pcie_tx_bytes_per_s": 1000 * 1024}, ("tel.pcie_tx_kbps=1000",)),
    Given("DCGM_FI_PROF_PCIE_RX_BYTES", 2000 * 1024, {"pcie_rx_bytes_per_s": 2000 * 1024}, ("tel.pcie_rx_kbps=2000",)),
]
PROFILING = {"graphics_active": 0.55, "tensor_active": 0.2, "dram_active": 0.33}
DEFAULT_FIELDS = [
    line.split(",")[0].strip() for line in DEFAULT_CSV.splitlines() if line.strip() and not line.startswith("#")
]
METRIC_FIELDS = [name for name in DEFAULT_FIELDS if name != "DCGM_FI_DRIVER_VERSION"]
# What an L4 (GDDR6, PCIe, Ada) cannot measure; a bare-metal GPU holds no vGPU licence either.
L4_ABSENT = {
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}
_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(page: str) -> Series:
    out: Series = {}
    for line in page.splitlines():
        match = _LINE.match(line)
        if match:
            labels = dict(_LABEL.findall(match.group(2)))
            out[match.group(1), labels["gpu"]] = (float(match.group(3)), labels)
    return out


def simulated_page(profile: str, *, given: bool) -> str:
    backend = SimulatedBackend(profile=node_profile(profile), seed=SEED, node_name=NODE)
    try:
        if given:
            readings: dict[str, object] = {"profiling": PROFILING}
            for g in GIVEN:
                readings.update(g.sim)
            backend.set_readings(0, **readings)
            backend.inject_xid(0, XID)
        collector = Collector(backend=backend, counters=CounterSource(path=None), pods=None, hostname="node")
        asyncio.run(collector.collect())
        return collector.page.body.decode()
    finally:
        backend.close()


def fake_page(libdir: Path, config_dir: Path, profile: str, *, given: bool) -> str:
    extra = [f"device.0.{key}" for g in GIVEN for key in g.fake] + [f"event.xid=0:{XID}"] if given else []
    config = fakenvml.write_config(
        config_dir / f"{profile}.conf", profile=node_profile(profile), seed=SEED, node_name=NODE, extra=extra
    )
    env = fakenvml.env(libdir=libdir, config=config)
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tests.contract.exporter_scrape"],
        cwd=fakenvml.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def pages(fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Series]:
    """(backend, profile) -> the parsed scrape: a DGX H100 with GPU 0 given the values, an idle L4."""
    config_dir = tmp_path_factory.mktemp("exporter-fields")
    return {
        ("simulated", "dgx-h100"): parse(simulated_page("dgx-h100", given=True)),
        ("simulated", "pcie-l4"): parse(simulated_page("pcie-l4", given=False)),
        ("nvml-fake", "dgx-h100"): parse(fake_page(fake_nvml_dir, config_dir, "dgx-h100", given=True)),
        ("nvml-fake", "pcie-l4"): parse(fake_page(fake_nvml_dir, config_dir, "pcie-l4", given=False)),
    }


def test_every_default_counter_has_a_given_value() -> None:
    assert sorted(g.name for g in GIVEN) == sorted(METRIC_FIELDS)


@pytest.mark.parametrize("given", GIVEN, ids=[g.name for g in GIVEN])
@pytest.mark.parametrize("backend", ["simulated", "nvml-fake"])
def test_field_carries_the_given_value(backend: str, given: Given, pages: dict[tuple[str, str], Series]) -> None:
    series = pages[backend, "dgx-h100"]
    assert (given.name, "0") in series, f"{given.name} missing from the {backend} scrape"
    value, labels = series[given.name, "0"]
    assert given.value <= value <= given.value + given.slack if given.slack else value == pytest.approx(given.value)
    assert labels["DCGM_FI_DRIVER_VERSION"] == node_profile("dgx-h100").driver_version


@pytest.mark.parametrize("backend", ["simulated", "nvml-fake"])
def test_a_gpu_reports_only_what_it_supports(backend: str, pages: dict[tuple[str, str], Series]) -> None:
    h100 = {name for name, gpu in pages[backend, "dgx-h100"] if gpu == "1"}
    # GPU 1 of the DGX was given nothing: bare metal, so no licence series; everything else is there.
    assert h100 == set(METRIC_FIELDS) - {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}
    l4 = {name for name, gpu in pages[backend, "pcie-l4"] if gpu == "0"}
    assert l4 == set(METRIC_FIELDS) - L4_ABSENT


@pytest.mark.parametrize("backend", ["simulated", "nvml-fake"])
def test_only_the_gpu_with_the_xid_reports_it(backend: str, pages: dict[tuple[str, str], Series]) -> None:
    series = pages[backend, "dgx-h100"]
    assert series["DCGM_FI_DEV_XID_ERRORS", "1"][0] == 0
