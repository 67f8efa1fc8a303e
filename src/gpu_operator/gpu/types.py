"""Plain data the GPU backends return: devices, MIG instances, topology links, health events, samples.

Frozen dataclasses with keyword-only construction, no behaviour and no vendor types, so agents and
tests can build and compare them freely. The interface that returns them is in ``backend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class LinkType(Enum):
    """How two GPUs are connected, best last (scores follow upstream's best-effort allocator)."""

    CROSS_CPU = 10  # different CPU sockets (SYS)
    SAME_CPU = 20  # same socket, through the host bridge hierarchy (NODE)
    HOST_BRIDGE = 30  # same PCIe host bridge (PHB)
    MULTI_SWITCH = 40  # several PCIe switches (PXB)
    SINGLE_SWITCH = 50  # one PCIe switch (PIX)
    SAME_BOARD = 60  # same board
    NVLINK = 100  # NVLink / NVSwitch, per link


@dataclass(frozen=True, kw_only=True)
class Link:
    """The connection between two GPUs (by index)."""

    a: int
    b: int
    type: LinkType
    nvlinks: int = 0  # number of NVLink lanes between the two; 0 unless type is NVLINK

    @property
    def score(self) -> int:
        base = int(self.type.value)
        return base * self.nvlinks if self.type is LinkType.NVLINK else base


@dataclass(frozen=True, kw_only=True)
class MigProfile:
    """A MIG GPU-instance profile such as ``1g.10gb`` (slices of compute and memory)."""

    name: str
    profile_id: int  # the GPU-instance profile ID nvidia-smi shows (e.g. 19 for 1g.10gb on H100)
    slices: int
    memory_mib: int
    max_count: int
    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0
    nvml_profile: int = -1  # NVML's profile index (NVML_GPU_INSTANCE_PROFILE_*), -1 when unknown


@dataclass(frozen=True, kw_only=True)
class MigAttributes:
    """A MIG device's share of its GPU, as NVML's nvmlDeviceGetAttributes reports it (GFD's MIG labels)."""

    multiprocessors: int
    gi_slices: int  # slices of the GPU instance
    ci_slices: int  # slices of the compute instance (at most the GPU instance's)
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True, kw_only=True)
class MigDevice:
    """A MIG device: one compute instance, in its GPU instance (which may hold several)."""

    uuid: str
    parent_index: int
    profile: str  # e.g. "1g.10gb"; "1c.3g.40gb" for a 1-slice compute instance in a 3g.40gb GPU instance
    gi_id: int
    ci_id: int
    memory_mib: int
    index: int  # position among the parent's MIG devices
    attributes: MigAttributes | None = None  # None: the driver cannot say (nvmlDeviceGetAttributes unsupported)


@dataclass(frozen=True, kw_only=True)
class Device:
    """A physical GPU as the driver reports it."""

    index: int
    uuid: str
    name: str  # e.g. "NVIDIA H100 80GB HBM3"
    pci_bus_id: str  # e.g. "00000000:3B:00.0"
    memory_mib: int
    compute_capability: tuple[int, int]
    architecture: str  # e.g. "hopper"
    serial: str
    board_part_number: str
    numa_node: int | None = None
    pci_device_id: int = 0  # device id << 16 | vendor id, e.g. 0x233010DE (mig-parted device filters)
    minor_number: int | None = None  # N in /dev/nvidiaN
    mig_capable: bool = False
    mig_enabled: bool = False  # current MIG mode
    mig_pending: bool = False  # a mode change waits for a GPU reset
    mig_profiles: tuple[MigProfile, ...] = ()
    pci_class: int | None = None  # 24-bit PCI class: 0x030200 3D controller (compute), 0x030000 VGA; None: unknown
    # "<cluster UUID>.<clique ID>" of a GPU attached to a multi-node NVLink fabric (GB200 NVL72 ...);
    # None when not attached: no fabric, registration not complete, or an all-zero cluster UUID (HGX H100).
    fabric_clique: str | None = None

    @property
    def family(self) -> str:
        return self.architecture


@dataclass(frozen=True, kw_only=True)
class HealthEvent:
    """Something happened to a GPU. ``xid`` is set for XID errors; ``lost``/``recovered`` otherwise.

    ``reset`` with ``recovered``: a GPU reset cleared the fault (the driver's recovery action went back
    to none after asking for a reset), as opposed to a lost GPU answering again.
    """

    uuid: str
    xid: int | None = None
    lost: bool = False
    recovered: bool = False
    reset: bool = False
    gi_id: int | None = None  # MIG: the GPU instance concerned, None for the whole GPU
    ci_id: int | None = None
    message: str = ""


#: GPU performance-monitoring (GPM) metrics a Sample may carry, as fractions of time or bandwidth
#: (0.0-1.0): NVML's GPM on Hopper and later, what DCGM's profiling module reports as DCGM_FI_PROF_*.
PROFILING_METRICS = (
    "graphics_active",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "fp64_active",
    "fp32_active",
    "fp16_active",
)


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One reading of a GPU's counters (units as DCGM reports them).

    ``None`` means the GPU cannot give that reading (no memory sensor on a GDDR part, no NVLink, no
    row remapping before Ampere, no GPM before Hopper, no licence outside a vGPU guest): the exporter
    then leaves the series out rather than reporting a made-up 0.
    """

    uuid: str
    gpu_util_pct: float
    mem_copy_util_pct: float
    enc_util_pct: float
    dec_util_pct: float
    fb_used_mib: int
    fb_free_mib: int
    fb_reserved_mib: int
    temperature_c: float
    memory_temperature_c: float | None
    power_w: float
    total_energy_mj: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    pcie_replay_count: int
    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    nvlink_bandwidth_total: int | None = None  # KiB sent and received over all NVLinks since boot
    last_xid: int = 0  # the last XID the driver reported (0: none since the reader started)
    pcie_tx_bytes_per_s: int | None = None
    pcie_rx_bytes_per_s: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failure: int | None = None  # 1 when a row could not be remapped
    clock_event_reasons: int | None = None  # NVML's clocks-event reason bit mask
    vgpu_license_status: int | None = None  # 1 licensed, 0 not (vGPU guests only)
    profiling: Mapping[str, float] = field(default_factory=dict)  # PROFILING_METRICS -> fraction
