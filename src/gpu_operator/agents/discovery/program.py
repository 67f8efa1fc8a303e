"""``gpu-operator agent gpu-discovery``: label this node ``nvidia.com/gpu.discovered`` from its PCI tree.

Runs on every Linux node of a cluster without Node Feature Discovery (the operator deploys it only
then), so the operator learns which nodes have NVIDIA GPUs; it is the only writer of that label.
``true`` when the PCI tree shows an NVIDIA display or 3D controller, ``false`` otherwise. Beside it,
the OS a tagged driver image needs, from the host's os-release (``osrelease``), under keys of its own.
Rescanned every ``DISCOVERY_INTERVAL_SECONDS`` (60); labels are written only when they change.

Environment: ``PCI_DEVICES_DIR`` (``/sys/bus/pci/devices``, a path on the node, read through the host
root mount; a test node points it at a fake tree) and ``DISCOVERY_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpu_operator.agents.discovery.osrelease import os_labels
from gpu_operator.agents.discovery.pci import nvidia_gpus
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.api.envtext import env_duration, env_path
from gpu_operator.names.keys import GPU_DISCOVERED
from gpu_operator.runtime.loop import LoopStats
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
DISCOVERED = GPU_DISCOVERED
DEFAULT_DEVICES = "/sys/bus/pci/devices"


def _interval(raw: str) -> float:
    """``DISCOVERY_INTERVAL_SECONDS``: seconds (``60``) or a duration (``1m``) from 1s to 24h."""
    value = env_duration(
        {"DISCOVERY_INTERVAL_SECONDS": raw}, "DISCOVERY_INTERVAL_SECONDS", default=60.0, minimum=1.0, maximum=86400.0
    )
    return 60.0 if value is None else value


def devices_dir(env: Mapping[str, str]) -> str:
    """``PCI_DEVICES_DIR``: the PCI tree scanned (an absolute path without '..'; the host's by default)."""
    return env_path(env, "PCI_DEVICES_DIR", default=DEFAULT_DEVICES)


async def discover_once(ctx: AgentContext) -> bool:
    """Scan the PCI tree and bring the label up to date; return whether this node has NVIDIA GPUs."""
    devices = ctx.host_path(devices_dir(ctx.env))
    gpus = nvidia_gpus(devices)
    wanted: dict[str, str | None] = {DISCOVERED: "true" if gpus else "false", **os_labels(ctx.host_path("/"))}
    if ctx.node is not None:
        labels = await ctx.node.labels()
        changes = {key: value for key, value in wanted.items() if labels.get(key) != value}
        if changes:
            await ctx.node.patch_labels(changes)
            log.info("%s on %s (GPUs at %s)", changes, ctx.node_name, ", ".join(gpus) or "-")
    return bool(gpus)


async def main(ctx: AgentContext) -> None:
    await run(ctx)


async def run(ctx: AgentContext) -> LoopStats:
    """Label the node every interval; a failed round (the API briefly unreachable) is retried sooner."""
    # Both checked before the first round: a bad value stops the agent with one line naming it.
    interval = _interval(ctx.env.get("DISCOVERY_INTERVAL_SECONDS") or "60")
    devices_dir(ctx.env)

    async def round_() -> None:
        await discover_once(ctx)
        ctx.set_ready(True)

    return await every(name=f"discovery[{ctx.node_name}]", seconds=interval, work=round_, sleep=ctx.sleep)
