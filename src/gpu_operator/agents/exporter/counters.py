"""The counters: the DCGM fields this exporter can serve, and dcgm-exporter's counter CSV selecting them.

**Fields.** An :class:`Entity` is what one series describes: a whole GPU, or one MIG GPU instance of it
(DCGM's ``GPU_I`` entity). Backends report counters per physical GPU, so a MIG instance repeats its
parent's device-level values (clocks, temperatures, power, as DCGM does) and gets a share of the
framebuffer proportional to its memory; the utilisation fields are not reported for MIG instances, as
DCGM does not support them there (NVIDIA/dcgm-exporter#272). Profiling (``DCGM_FI_PROF_*``) fields need
DCGM's profiling module: a backend may supply them in ``Sample.extra`` under the field name; otherwise
the two with an NVML equivalent are derived (graphics-engine activity from GPU utilisation, DRAM
activity from memory-copy utilisation) and the others are left out, as dcgm-exporter leaves out fields
that are not enabled.

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


def _extra(name: str, fallback: Callable[[Entity], Value] | None = None) -> Callable[[Entity], Value]:
    def read(entity: Entity) -> Value:
        value = entity.sample.extra.get(name)
        if value is not None:
            return value
        return fallback(entity) if fallback is not None else None

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


def _zero(name: str) -> Callable[[Entity], Value]:
    """A field backends rarely report, 0 when absent (what DCGM shows on GPUs without the feature)."""
    return _extra(name, lambda entity: 0)


def _fields() -> dict[str, Field]:
    table = [
        Field(name="DCGM_FI_DEV_SM_CLOCK", read=_sample("sm_clock_mhz")),
        Field(name="DCGM_FI_DEV_MEM_CLOCK", read=_sample("mem_clock_mhz")),
        Field(name="DCGM_FI_DEV_MEMORY_TEMP", read=_sample("memory_temperature_c")),
        Field(name="DCGM_FI_DEV_GPU_TEMP", read=_sample("temperature_c")),
        Field(name="DCGM_FI_DEV_POWER_USAGE", read=_sample("power_w")),
        Field(name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", read=_sample("total_energy_mj")),
        Field(name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER", read=_sample("pcie_replay_count")),
        Field(name="DCGM_FI_DEV_GPU_UTIL", read=_sample("gpu_util_pct"), mig=False),
        Field(name="DCGM_FI_DEV_MEM_COPY_UTIL", read=_sample("mem_copy_util_pct"), mig=False),
        Field(name="DCGM_FI_DEV_ENC_UTIL", read=_sample("enc_util_pct")),
        Field(name="DCGM_FI_DEV_DEC_UTIL", read=_sample("dec_util_pct")),
        Field(name="DCGM_FI_DEV_XID_ERRORS", read=_sample("last_xid")),
        Field(name="DCGM_FI_DEV_FB_FREE", read=_fb("fb_free_mib")),
        Field(name="DCGM_FI_DEV_FB_USED", read=_fb("fb_used_mib")),
        Field(name="DCGM_FI_DEV_FB_RESERVED", read=_fb("fb_reserved_mib")),
        Field(name="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", read=_sample("nvlink_bandwidth_total")),
        Field(name="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", read=_sample("ecc_sbe_volatile")),
        Field(name="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", read=_sample("ecc_dbe_volatile")),
        # Bare-metal GPUs hold no vGPU licence: DCGM reports 0 there.
        Field(name="DCGM_FI_DEV_VGPU_LICENSE_STATUS", read=_zero("DCGM_FI_DEV_VGPU_LICENSE_STATUS")),
        Field(name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", read=_zero("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")),
        Field(name="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", read=_zero("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")),
        Field(name="DCGM_FI_DEV_ROW_REMAP_FAILURE", read=_zero("DCGM_FI_DEV_ROW_REMAP_FAILURE")),
        Field(
            name="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            read=_extra("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda e: round(e.sample.gpu_util_pct / 100.0, 6)),
        ),
        Field(name="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", read=_extra("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
        Field(
            name="DCGM_FI_PROF_DRAM_ACTIVE",
            read=_extra("DCGM_FI_PROF_DRAM_ACTIVE", lambda e: round(e.sample.mem_copy_util_pct / 100.0, 6)),
        ),
        Field(name="DCGM_FI_PROF_PCIE_TX_BYTES", read=_extra("DCGM_FI_PROF_PCIE_TX_BYTES")),
        Field(name="DCGM_FI_PROF_PCIE_RX_BYTES", read=_extra("DCGM_FI_PROF_PCIE_RX_BYTES")),
        Field(name="DCGM_FI_PROF_SM_ACTIVE", read=_extra("DCGM_FI_PROF_SM_ACTIVE")),
        Field(name="DCGM_FI_PROF_SM_OCCUPANCY", read=_extra("DCGM_FI_PROF_SM_OCCUPANCY")),
        # Text fields: dcgm-exporter turns a field of type "label" into a label on every sample.
        Field(name="DCGM_FI_DRIVER_VERSION", read=lambda e: e.driver_version, text=True),
        Field(name="DCGM_FI_DEV_NAME", read=lambda e: e.device.name, text=True),
        Field(name="DCGM_FI_DEV_SERIAL", read=lambda e: e.device.serial, text=True),
        Field(name="DCGM_FI_DEV_UUID", read=lambda e: e.device.uuid, text=True),
        Field(
            name="DCGM_FI_DEV_MINOR_NUMBER",
            read=lambda e: e.device.minor_number if e.device.minor_number is not None else e.device.index,
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


class CsvError(ValueError):
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
