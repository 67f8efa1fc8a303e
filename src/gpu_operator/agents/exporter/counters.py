"""The counters: the DCGM fields this exporter can serve, and dcgm-exporter's counter CSV selecting them.

**Fields.** An :class:`Entity` is what one series describes: a whole GPU, or one MIG GPU instance of it
(DCGM's ``GPU_I`` entity). Backends report counters per physical GPU, so a MIG instance repeats its
parent's device-level values (clocks, temperatures, power, as DCGM does) and gets a share of the
framebuffer proportional to its memory; the utilisation and profiling fields are not reported for MIG
instances, as DCGM does not support them there (NVIDIA/dcgm-exporter#272). Every value comes from the
backend's reading (``gpu.nvml_readings`` lists the NVML call behind each); a reading the GPU cannot
give is ``None`` and its series is left out, as dcgm-exporter leaves out fields a GPU does not support.

**CSV.** One record per line, ``field, type, help``; blank lines and lines starting with ``#`` are
ignored and spaces around each cell are trimmed (upstream's own file has ``DCGM_FI_DEV_DEC_UTIL ,``).
Types are ``gauge``, ``counter`` and ``label`` (the field's value becomes a label on every sample). A
malformed file is rejected as a whole with the line number (:class:`CsvError`), so the caller keeps the
set it had. Field names this exporter cannot serve are not an error: they are collected in
:attr:`CounterSet.unknown` with their line numbers, reported, and skipped, so one typo in a ConfigMap
does not take every GPU metric away.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.types import Device, MigDevice, Sample

Value = float | int | str | None


@dataclass(frozen=True, kw_only=True)
class Entity:
    """One GPU, or one MIG GPU instance (``mig`` set), with the reading of its GPU."""

    device: Device
    sample: Sample
    driver_version: str
    mig: MigDevice | None = None

    def fb_share(self) -> float:
        """The part of the GPU's usable framebuffer this entity stands for (1.0 for a whole GPU)."""
        if self.mig is None:
            return 1.0
        usable = max(1, self.device.memory_mib - self.sample.fb_reserved_mib)
        return min(1.0, self.mig.memory_mib / usable)


@dataclass(frozen=True, kw_only=True)
class Field:
    """A DCGM field: its name, how to read it, and whether it is text (usable only as a label)."""

    name: str
    read: Callable[[Entity], Value]
    text: bool = False
    mig: bool = True  # also reported for MIG instances
    reading: str = ""  # the Sample attribute it reports (``gpu.telemetry.NVML_SOURCES`` names the NVML call)


def _profiling(name: str) -> Callable[[Entity], Value]:
    """A GPM metric (``types.PROFILING_METRICS``), absent on GPUs without GPM."""

    def read(entity: Entity) -> Value:
        return entity.sample.profiling.get(name)

    return read


def _fb(attribute: str) -> Callable[[Entity], Value]:
    def read(entity: Entity) -> Value:
        value: int = getattr(entity.sample, attribute)
        return value if entity.mig is None else round(value * entity.fb_share())

    return read


def _sample(attribute: str) -> Callable[[Entity], Value]:
    """A counter of the GPU's ``Sample``."""

    def read(entity: Entity) -> Value:
        value: Value = getattr(entity.sample, attribute)
        return value

    return read


#: The DCGM profiling field of each GPM metric.
PROFILING_FIELDS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "graphics_active",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": "fp64_active",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": "fp32_active",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": "fp16_active",
}


def _s(name: str, attribute: str, *, mig: bool = True) -> Field:
    return Field(name=name, read=_sample(attribute), reading=attribute, mig=mig)


def _fields() -> dict[str, Field]:
    table = [
        _s("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
        _s("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz"),
        _s("DCGM_FI_DEV_MEMORY_TEMP", "memory_temperature_c"),
        _s("DCGM_FI_DEV_GPU_TEMP", "temperature_c"),
        _s("DCGM_FI_DEV_POWER_USAGE", "power_w"),
        _s("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "total_energy_mj"),
        _s("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_count"),
        _s("DCGM_FI_DEV_GPU_UTIL", "gpu_util_pct", mig=False),
        _s("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_copy_util_pct", mig=False),
        _s("DCGM_FI_DEV_ENC_UTIL", "enc_util_pct"),
        _s("DCGM_FI_DEV_DEC_UTIL", "dec_util_pct"),
        _s("DCGM_FI_DEV_XID_ERRORS", "last_xid"),
        *(
            Field(name=f"DCGM_FI_DEV_FB_{part.upper()}", read=_fb(f"fb_{part}_mib"), reading=f"fb_{part}_mib")
            for part in ("free", "used", "reserved")
        ),
        _s("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "nvlink_bandwidth_total"),
        _s("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe_volatile"),
        _s("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe_volatile"),
        _s("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vgpu_license_status"),
        _s("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrectable"),
        _s("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_correctable"),
        _s("DCGM_FI_DEV_ROW_REMAP_FAILURE", "row_remap_failure"),
        _s("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_reasons"),
        # The field's name before DCGM 3.3 renamed "throttle" to "clocks event".
        _s("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_reasons"),
        _s("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bytes_per_s"),
        _s("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bytes_per_s"),
        *(
            Field(name=name, read=_profiling(metric), reading=f"profiling.{metric}", mig=False)
            for name, metric in PROFILING_FIELDS.items()
        ),
        # Text fields: dcgm-exporter turns a field of type "label" into a label on every sample.
        Field(name="DCGM_FI_DRIVER_VERSION", read=lambda e: e.driver_version, text=True, reading="driver_version"),
        Field(name="DCGM_FI_DEV_NAME", read=lambda e: e.device.name, text=True, reading="device.name"),
        Field(name="DCGM_FI_DEV_SERIAL", read=lambda e: e.device.serial, text=True, reading="device.serial"),
        Field(name="DCGM_FI_DEV_UUID", read=lambda e: e.device.uuid, text=True, reading="device.uuid"),
        Field(
            name="DCGM_FI_DEV_MINOR_NUMBER",
            read=lambda e: e.device.minor_number if e.device.minor_number is not None else e.device.index,
            reading="device.minor_number",
        ),
    ]
    return {f.name: f for f in table}


#: Every field this exporter can serve, by DCGM name (immutable after import).
FIELDS: Mapping[str, Field] = MappingProxyType(_fields())


TYPES = ("gauge", "counter", "label")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The default set, in dcgm-exporter's default order (help texts are this project's own wording).
DEFAULT_CSV = """\
# Format: DCGM field, Prometheus type (gauge, counter or label), help text.
# Clocks
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
# Temperature
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
# Power
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy used since the driver loaded (in mJ).
# PCIe
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, PCIe replays (link-level retries).
# Utilisation
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilisation (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory copy utilisation (in %).
DCGM_FI_DEV_ENC_UTIL, gauge, Encoder utilisation (in %).
DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilisation (in %).
# Errors
DCGM_FI_DEV_XID_ERRORS, gauge, The last XID error the GPU reported.
# Framebuffer
DCGM_FI_DEV_FB_FREE, gauge, Free framebuffer memory (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Used framebuffer memory (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved by the driver (in MiB).
# NVLink
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, NVLink traffic over all lanes.
# vGPU
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU licence status.
# Row remapping
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Rows remapped after uncorrectable errors.
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Rows remapped after correctable errors.
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether a row remapping failed.
# Labels
DCGM_FI_DRIVER_VERSION, label, Driver version.
# Profiling (DCGM's profiling module)
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Fraction of time the graphics or compute engine was active.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Fraction of cycles the tensor pipes were active.
DCGM_FI_PROF_DRAM_ACTIVE, gauge, Fraction of cycles device memory was read or written.
DCGM_FI_PROF_PCIE_TX_BYTES, gauge, PCIe bytes sent per second.
DCGM_FI_PROF_PCIE_RX_BYTES, gauge, PCIe bytes received per second.
"""


class CsvError(ConfigRefusedError):
    """The counter CSV is malformed; the message names the line."""

    def __init__(self, *, source: str, line: int, problem: str) -> None:
        super().__init__(f"{source}: line {line}: {problem}")
        self.source = source
        self.line = line


@dataclass(frozen=True, kw_only=True)
class Counter:
    field: str
    type: str  # gauge, counter or label
    help: str


@dataclass(frozen=True, kw_only=True)
class CounterSet:
    """The counters to export (metrics and labels, in file order) and the names that were skipped."""

    metrics: tuple[Counter, ...]
    labels: tuple[Counter, ...]
    unknown: tuple[tuple[int, str], ...] = ()  # (line, field) this exporter cannot serve

    def describe_unknown(self, *, source: str) -> str:
        """One line naming every skipped field and where it is."""
        names = ", ".join(f"{name} (line {line})" for line, name in self.unknown)
        return f"{source}: skipping counters this exporter does not know: {names}"


def parse_counters(text: str, *, source: str = "counters CSV") -> CounterSet:
    """Parse a counter CSV; raises CsvError naming the first bad line."""
    metrics: list[Counter] = []
    labels: list[Counter] = []
    unknown: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            (record,) = list(csv.reader([line], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise CsvError(source=source, line=number, problem=f"not a CSV record ({exc}): {raw!r}") from exc
        cells = [cell.strip() for cell in record]
        if len(cells) != 3:
            raise CsvError(
                source=source,
                line=number,
                problem=f"expected 3 fields (field, type, help), found {len(cells)}: {raw!r}",
            )
        name, kind, help_text = cells
        if not _NAME.match(name):
            raise CsvError(source=source, line=number, problem=f"not a field name: {name!r}")
        if kind not in TYPES:
            raise CsvError(
                source=source, line=number, problem=f"{name}: unknown type {kind!r} (expected gauge, counter or label)"
            )
        if name in seen:
            raise CsvError(source=source, line=number, problem=f"{name} is already listed on line {seen[name]}")
        seen[name] = number
        field = FIELDS.get(name)
        if field is None:
            unknown.append((number, name))
            continue
        if field.text and kind != "label":
            raise CsvError(
                source=source, line=number, problem=f"{name} is a text field: its type must be label, not {kind}"
            )
        counter = Counter(field=name, type=kind, help=help_text or name)
        (labels if kind == "label" else metrics).append(counter)
    return CounterSet(metrics=tuple(metrics), labels=tuple(labels), unknown=tuple(unknown))


def default_counters() -> CounterSet:
    return parse_counters(DEFAULT_CSV, source="built-in default counters")
