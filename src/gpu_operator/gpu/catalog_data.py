"""The data behind ``catalog``: GPU models, their MIG profiles, and node profiles, as plain literals.

Kept apart from the code so that adding a SKU or a node shape is a data change. Names are the
strings NVML reports; memory sizes are what NVML reports in MiB (a little under the marketing size);
MIG rows are ``(name, profile ID, NVML profile index, instances, memory MiB, SMs, copy engines,
decoders, encoders, JPEG, OFA)``. Values not documented per SKU (board part numbers, idle clocks,
reserved memory) are plausible stand-ins: the simulated backend needs a value, nothing checks it.
"""

from __future__ import annotations

from typing import Any

MigRow = tuple[str, int, int, int, int, int, int, int, int, int, int]

_A100_40GB_MIG: list[MigRow] = [
    ("1g.5gb", 19, 0, 7, 4864, 14, 1, 0, 0, 0, 0),
    ("1g.5gb+me", 20, 7, 1, 4864, 14, 1, 1, 0, 1, 1),
    ("1g.10gb", 15, 9, 4, 9856, 14, 1, 1, 0, 0, 0),
    ("2g.10gb", 14, 1, 3, 9856, 28, 2, 1, 0, 0, 0),
    ("3g.20gb", 9, 2, 2, 19968, 42, 3, 2, 0, 0, 0),
    ("4g.20gb", 5, 3, 1, 19968, 56, 4, 2, 0, 0, 0),
    ("7g.40gb", 0, 4, 1, 40192, 98, 7, 5, 0, 1, 1),
]

_A100_80GB_MIG: list[MigRow] = [
    ("1g.10gb", 19, 0, 7, 9728, 14, 1, 0, 0, 0, 0),
    ("1g.10gb+me", 20, 7, 1, 9728, 14, 1, 1, 0, 1, 1),
    ("1g.20gb", 15, 9, 4, 19968, 14, 1, 1, 0, 0, 0),
    ("2g.20gb", 14, 1, 3, 19968, 28, 2, 1, 0, 0, 0),
    ("3g.40gb", 9, 2, 2, 40192, 42, 3, 2, 0, 0, 0),
    ("4g.40gb", 5, 3, 1, 40192, 56, 4, 2, 0, 0, 0),
    ("7g.80gb", 0, 4, 1, 80896, 98, 7, 5, 0, 1, 1),
]

_H100_80GB_MIG: list[MigRow] = [
    ("1g.10gb", 19, 0, 7, 9984, 16, 1, 1, 0, 1, 0),
    ("1g.10gb+me", 20, 7, 1, 9984, 16, 1, 1, 0, 1, 1),
    ("1g.20gb", 15, 9, 4, 20096, 26, 1, 1, 0, 1, 0),
    ("2g.20gb", 14, 1, 3, 20096, 32, 2, 2, 0, 2, 0),
    ("3g.40gb", 9, 2, 2, 40320, 60, 3, 3, 0, 3, 0),
    ("4g.40gb", 5, 3, 1, 40320, 64, 4, 4, 0, 4, 0),
    ("7g.80gb", 0, 4, 1, 80896, 132, 8, 7, 0, 7, 1),
]

# Memory as real NVML reports it on an H200 (driver 580.159.04, gpu tier 2026-12-04).
_H200_141GB_MIG: list[MigRow] = [
    ("1g.18gb", 19, 0, 7, 16384, 16, 1, 1, 0, 1, 0),
    ("1g.18gb+me", 20, 7, 1, 16384, 16, 1, 1, 0, 1, 1),
    ("1g.35gb", 15, 9, 4, 33280, 26, 1, 1, 0, 1, 0),
    ("2g.35gb", 14, 1, 3, 33280, 32, 2, 2, 0, 2, 0),
    ("3g.71gb", 9, 2, 2, 71424, 60, 3, 3, 0, 3, 0),
    ("4g.71gb", 5, 3, 1, 71424, 64, 4, 4, 0, 4, 0),
    ("7g.141gb", 0, 4, 1, 143360, 132, 8, 7, 0, 7, 1),
]

_B200_MIG: list[MigRow] = [
    ("1g.23gb", 19, 0, 7, 22528, 18, 1, 1, 0, 1, 0),
    ("1g.23gb+me", 20, 7, 1, 22528, 18, 1, 1, 0, 1, 1),
    ("1g.45gb", 15, 9, 4, 45056, 18, 1, 1, 0, 1, 0),
    ("2g.45gb", 14, 1, 3, 45056, 36, 2, 2, 0, 2, 0),
    ("3g.90gb", 9, 2, 2, 90112, 60, 3, 3, 0, 3, 0),
    ("4g.90gb", 5, 3, 1, 90112, 72, 4, 4, 0, 4, 0),
    ("7g.180gb", 0, 4, 1, 180224, 148, 8, 7, 0, 7, 1),
]

# Field order of a GPU model; see GpuModel in catalog.py for the meaning of each.
GPU_MODEL_ROWS: dict[str, dict[str, Any]] = {
    "a100-sxm4-40gb": {
        "name": "NVIDIA A100-SXM4-40GB",
        "architecture": "ampere",
        "compute_capability": (8, 0),
        "memory_mib": 40960,
        "reserved_mib": 557,
        "pci_device_id": 0x20B010DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "692-2G506-0200-002",
        "tdp_w": 400,
        "idle_w": 55,
        "sm_clock_mhz": (210, 1410),
        "mem_clock_mhz": 1215,
        "nvlinks": 12,
        "mig": _A100_40GB_MIG,
    },
    "a100-sxm4-80gb": {
        "name": "NVIDIA A100-SXM4-80GB",
        "architecture": "ampere",
        "compute_capability": (8, 0),
        "memory_mib": 81920,
        "reserved_mib": 637,
        "pci_device_id": 0x20B210DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "692-2G506-0210-002",
        "tdp_w": 400,
        "idle_w": 60,
        "sm_clock_mhz": (210, 1410),
        "mem_clock_mhz": 1593,
        "nvlinks": 12,
        "mig": _A100_80GB_MIG,
    },
    "h100-sxm5-80gb": {
        "name": "NVIDIA H100 80GB HBM3",
        "architecture": "hopper",
        "compute_capability": (9, 0),
        "memory_mib": 81559,
        "reserved_mib": 551,
        "pci_device_id": 0x233010DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "692-2G520-0200-000",
        "tdp_w": 700,
        "idle_w": 70,
        "sm_clock_mhz": (345, 1980),
        "mem_clock_mhz": 2619,
        "nvlinks": 18,
        "mig": _H100_80GB_MIG,
    },
    "h200-sxm-141gb": {
        "name": "NVIDIA H200",
        "architecture": "hopper",
        "compute_capability": (9, 0),
        "memory_mib": 143771,
        "reserved_mib": 615,
        "pci_device_id": 0x233510DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "692-2G520-0280-000",
        "tdp_w": 700,
        "idle_w": 75,
        "sm_clock_mhz": (345, 1980),
        "mem_clock_mhz": 3201,
        "nvlinks": 18,
        "mig": _H200_141GB_MIG,
    },
    "b200": {
        "name": "NVIDIA B200",
        "architecture": "blackwell",
        "compute_capability": (10, 0),
        "memory_mib": 183359,
        "reserved_mib": 900,
        "pci_device_id": 0x290110DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "692-2G525-0220-000",
        "tdp_w": 1000,
        "idle_w": 140,
        "sm_clock_mhz": (345, 1965),
        "mem_clock_mhz": 3996,
        "nvlinks": 18,
        "mig": _B200_MIG,
    },
    "l4": {
        "name": "NVIDIA L4",
        "architecture": "ada-lovelace",
        "compute_capability": (8, 9),
        "memory_mib": 23034,
        "reserved_mib": 350,
        "pci_device_id": 0x27B810DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "900-2G193-0000-001",
        "tdp_w": 72,
        "idle_w": 16,
        "sm_clock_mhz": (210, 2040),
        "mem_clock_mhz": 6251,
        "nvlinks": 0,
        "mig": [],
    },
    "t4": {
        "name": "Tesla T4",
        "architecture": "turing",
        "compute_capability": (7, 5),
        "memory_mib": 15360,
        "reserved_mib": 250,
        "pci_device_id": 0x1EB810DE,
        "pci_class": 0x030200,  # 3D controller: a compute GPU (0x030000 would be VGA)
        "board_part_number": "900-2G183-0000-001",
        "tdp_w": 70,
        "idle_w": 10,
        "sm_clock_mhz": (300, 1590),
        "mem_clock_mhz": 5001,
        "nvlinks": 0,
        "mig": [],
    },
}

_UBUNTU_2204 = {"os_id": "ubuntu", "os_version_id": "22.04"}
_DGX_OS = {**_UBUNTU_2204, "kernel_version": "5.15.0-1063-nvidia", "cpu_cores": 224, "memory": "2048Gi"}

# (socket, PCIe switch) of each GPU. Only used for PCIe links: NVSwitch nodes connect every pair.
_L4_LAYOUT = ((0, 0), (0, 1), (1, 2), (1, 2))  # (0,1) host bridge, (2,3) one switch, rest cross-CPU

NODE_PROFILE_ROWS: dict[str, dict[str, Any]] = {
    "dgx-h100": {
        **_DGX_OS,
        "gpu_model": "h100-sxm5-80gb",
        "gpu_count": 8,
        "nvswitch": True,
        "driver_version": "550.54.15",
        "machine": "DGX H100",
    },
    "dgx-a100": {
        **_DGX_OS,
        "gpu_model": "a100-sxm4-80gb",
        "gpu_count": 8,
        "nvswitch": True,
        "cpu_cores": 256,
        "driver_version": "535.161.08",
        "machine": "DGXA100 920-23687-2530-000",
    },
    "hgx-h200": {
        **_UBUNTU_2204,
        "gpu_model": "h200-sxm-141gb",
        "gpu_count": 8,
        "nvswitch": True,
        "cpu_cores": 192,
        "memory": "2048Gi",
        "kernel_version": "5.15.0-119-generic",
        "driver_version": "550.90.07",
        "machine": "HGX H200",
    },
    "dgx-b200": {
        "os_id": "ubuntu",
        "os_version_id": "24.04",
        "kernel_version": "6.8.0-1017-nvidia",
        "gpu_model": "b200",
        "gpu_count": 8,
        "nvswitch": True,
        "cpu_cores": 224,
        "memory": "4096Gi",
        "driver_version": "570.124.06",
        "machine": "DGX B200",
    },
    "pcie-l4": {
        **_UBUNTU_2204,
        "gpu_model": "l4",
        "gpu_count": 4,
        "nvswitch": False,
        "cpu_cores": 96,
        "memory": "384Gi",
        "kernel_version": "5.15.0-119-generic",
        "driver_version": "550.54.15",
        "machine": "PowerEdge R760",
        "pcie_layout": _L4_LAYOUT,
    },
    "pcie-t4": {
        "os_id": "rhel",
        "os_version_id": "9.4",
        "kernel_version": "5.14.0-427.13.1.el9_4.x86_64",
        "gpu_model": "t4",
        "gpu_count": 2,
        "nvswitch": False,
        "cpu_cores": 32,
        "memory": "128Gi",
        "driver_version": "535.161.08",
        "machine": "ProLiant DL380 Gen10",
        "pcie_layout": ((0, 0), (1, 1)),
    },
    "a100-mig": {
        **_UBUNTU_2204,
        "gpu_model": "a100-sxm4-40gb",
        "gpu_count": 2,
        "nvswitch": False,
        "cpu_cores": 128,
        "memory": "1024Gi",
        "kernel_version": "5.15.0-119-generic",
        "driver_version": "550.54.15",
        "machine": "HGX A100",
        "pcie_layout": ((0, 0), (0, 0)),
    },
    "cpu-only": {
        **_UBUNTU_2204,
        "gpu_model": None,
        "gpu_count": 0,
        "nvswitch": False,
        "cpu_cores": 16,
        "memory": "64Gi",
        "kernel_version": "5.15.0-119-generic",
        "driver_version": "",
        "machine": "",
    },
}

# Driver branch -> the CUDA driver API version it ships (nvidia-smi's "CUDA Version").
CUDA_BY_DRIVER_BRANCH: dict[int, tuple[int, int]] = {
    470: (11, 4),
    510: (11, 6),
    515: (11, 7),
    520: (11, 8),
    525: (12, 0),
    530: (12, 1),
    535: (12, 2),
    545: (12, 3),
    550: (12, 4),
    555: (12, 5),
    560: (12, 6),
    565: (12, 7),
    570: (12, 8),
    575: (12, 9),
    580: (13, 0),
    590: (13, 1),
}
