"""GPU recovery actions: what the driver asks for after a fault, and which XIDs ask for what.

Since R550 the driver keeps, per GPU, the action it needs before the GPU is trustworthy again
(NVML field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, id 230, ``nvmlDeviceGpuRecoveryAction_t``). It
is set with the XID that caused it and goes back to ``NONE`` once the action happened (a GPU reset
clears a reset request). The NVML backend watches it after an XID; the simulated backend and the
fake ``libnvidia-ml.so.1`` (``hack/fake-nvml/fake_nvml.c``, same table) set it from ``XID_ACTIONS``.

``XID_ACTIONS`` is a small table after the resolution column of NVIDIA's XID catalogue
(docs.nvidia.com/deploy/xid-errors): uncorrectable memory errors (48 double-bit ECC, 95 uncontained
ECC), row remapping (63 pending, 64 failure), NVLink errors (74), GSP errors (119, 120) and
unrecovered ECC (140) need a GPU reset; a GPU fallen off the bus (79) a node reboot. Application
errors (13, 31, 43, 45, 68, 109) and a contained ECC error (94: restart the application) need nothing.
XIDs not in the table need nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# nvmlDeviceGpuRecoveryAction_t (nvml.h).
NONE = 0
GPU_RESET = 1
NODE_REBOOT = 2
DRAIN_P2P = 3
DRAIN_AND_RESET = 4
RECOVER_IMEX_DOMAIN = 5
BUS_RESET = 6
SYSTEM_REBOOT = 7

#: Actions that a GPU reset (or something stronger) satisfies.
RESET_ACTIONS = frozenset({GPU_RESET, NODE_REBOOT, DRAIN_AND_RESET, BUS_RESET, SYSTEM_REBOOT})

NAMES: Mapping[int, str] = MappingProxyType(
    {
        NONE: "none",
        GPU_RESET: "GPU reset",
        NODE_REBOOT: "node reboot",
        DRAIN_P2P: "drain P2P",
        DRAIN_AND_RESET: "drain and reset",
        RECOVER_IMEX_DOMAIN: "recover IMEX domain",
        BUS_RESET: "bus reset",
        SYSTEM_REBOOT: "system reboot",
    }
)

XID_ACTIONS: Mapping[int, int] = MappingProxyType(
    {
        48: GPU_RESET,
        63: GPU_RESET,
        64: GPU_RESET,
        74: GPU_RESET,
        79: NODE_REBOOT,
        95: GPU_RESET,
        119: GPU_RESET,
        120: GPU_RESET,
        140: GPU_RESET,
    }
)


def action_for_xid(xid: int) -> int:
    """The recovery action the driver asks for after ``xid`` (NONE when it asks for none)."""
    return XID_ACTIONS.get(xid, NONE)


def needs_reset(action: int) -> bool:
    return action in RESET_ACTIONS


def describe(action: int) -> str:
    return NAMES.get(action, f"action {action}")
