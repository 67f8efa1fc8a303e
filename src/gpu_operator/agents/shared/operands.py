"""Pausing and restoring GPU operands through their ``nvidia.com/gpu.deploy.<operand>`` labels.

An operand DaemonSet selects ``nvidia.com/gpu.deploy.<operand>=true``, so rewriting the value takes its
pod off the node. The rules (node-labels.md §3): ``true`` becomes ``paused-for-<reason>``; ``false`` is
the admin's opt-out and is never touched; another value ``v`` becomes ``v_paused-for-<reason>``; an
absent label stays absent. Restoring undoes exactly that for every deploy label carrying the reason,
so a restore also heals labels a crashed earlier run left paused.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from types import MappingProxyType

from gpu_operator.agents.shared.cluster import NodeCluster
from gpu_operator.names import keys
from gpu_operator.runtime.backoff import error_kind
from gpu_operator.runtime.periodic import attempt

DEPLOY = keys.DEPLOY_PREFIX
DRIVER_PAUSE = "paused-for-driver-upgrade"
MIG_PAUSE = "paused-for-mig-change"

DRIVER_OPERANDS = (
    "operator-validator",
    "container-toolkit",
    "device-plugin",
    "gpu-feature-discovery",
    "dcgm-exporter",
    "dcgm",
    "nvsm",
    "sandbox-validator",
    "sandbox-device-plugin",
    "vgpu-device-manager",
    "dra-validator",
    "dcgm-dra",
    "dcgm-exporter-dra",
    "mig-manager",
    "client",
)
MIG_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm", "client")

# The ``app`` label of each operand's pods: what the agents wait on to be gone.
OPERAND_APPS: Mapping[str, str] = MappingProxyType(
    {
        "operator-validator": "nvidia-operator-validator",
        "container-toolkit": "nvidia-container-toolkit-daemonset",
        "device-plugin": "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery": "gpu-feature-discovery",
        "dcgm-exporter": "nvidia-dcgm-exporter",
        "dcgm": "nvidia-dcgm",
        "mig-manager": "nvidia-mig-manager",
        "sandbox-validator": "nvidia-sandbox-validator",
        "sandbox-device-plugin": "nvidia-sandbox-device-plugin-daemonset",
    }
)

Sleep = Callable[[float], Awaitable[bool]]  # sleeps; True when the agent is asked to stop
Clock = Callable[[], float]


def _key(operand: str) -> str:
    return operand if "/" in operand else DEPLOY + operand


def pause_changes(labels: Mapping[str, str], *, operands: Iterable[str], reason: str) -> dict[str, str | None]:
    """Label changes pausing ``operands`` for ``reason`` (e.g. ``paused-for-mig-change``)."""
    changes: dict[str, str | None] = {}
    for operand in operands:
        key = _key(operand)
        value = labels.get(key)
        if value is None or value in ("false", reason) or value.endswith("_" + reason):
            continue
        changes[key] = reason if value == "true" else f"{value}_{reason}"
    return changes


def restore_changes(labels: Mapping[str, str], *, reason: str, extra: Iterable[str] = ()) -> dict[str, str | None]:
    """Label changes undoing every pause for ``reason`` (deploy labels and the ``extra`` keys)."""
    keys = {k for k in labels if k.startswith(DEPLOY)} | {_key(k) for k in extra}
    changes: dict[str, str | None] = {}
    for key in sorted(keys):
        value = labels.get(key)
        if value == reason:
            changes[key] = "true"
        elif value is not None and value.endswith("_" + reason):
            changes[key] = value[: -len(reason) - 1]
    return changes


def paused(labels: Mapping[str, str], *, reason: str) -> list[str]:
    """Deploy labels currently paused for ``reason``."""
    return sorted(k for k, v in labels.items() if k.startswith(DEPLOY) and (v == reason or v.endswith("_" + reason)))


def apps_for(operands: Iterable[str]) -> list[str]:
    return [OPERAND_APPS[o] for o in operands if o in OPERAND_APPS]


async def _operand_pods(cluster: NodeCluster, apps: Sequence[str]) -> list[str]:
    left: list[str] = []
    for app in apps:
        left.extend(f"{p.namespace}/{p.name}" for p in await cluster.list_pods(selector=f"app={app}"))
    return left


async def wait_for_pods_gone(
    cluster: NodeCluster,
    *,
    apps: Sequence[str],
    timeout: float,
    sleep: Sleep,
    interval: float = 1.0,
    clock: Clock = time.monotonic,
) -> list[str]:
    """Wait until no pod with ``app=<one of apps>`` is left on the node; returns those left at the timeout."""
    deadline = clock() + timeout
    left = [f"app={app} (not listed yet)" for app in apps]
    while True:
        listed = await attempt(partial(_operand_pods, cluster, apps), name="waiting for operand pods to go")
        if listed.value is not None:  # else the API failed: poll again
            left = listed.value
        elif listed.error is not None:  # what is returned at the timeout then says why nothing was listed
            left = [f"app={app} (not listed: {error_kind(listed.error)}: {listed.error})" for app in apps]
        if (listed.ok and not left) or clock() >= deadline:
            return sorted(left)
        if await sleep(min(interval, max(0.0, deadline - clock()))):
            return sorted(left)
