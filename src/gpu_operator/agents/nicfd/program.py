"""``gpu-operator agent nic-feature-discovery``: scan the node's NICs and keep its labels in step.

Every ``NIC_FD_INTERVAL`` (seconds, or a duration like ``1m``; 60 by default, upstream's scan
interval) the agent reads the NIC backend (:func:`gpu_operator.nic.open.open_nics`: the host's sysfs,
or ``NIC_BACKEND=null``), computes the labels (:mod:`.labels`) and patches the Node: labels of its own
family that changed are set, those that no longer apply are removed, every other label is left alone,
and nothing is written when nothing changed. Ready after the first successful pass. A failed pass
(the API unreachable) is retried by :func:`gpu_operator.runtime.periodic.every`; a bad
``NIC_BACKEND`` or ``NIC_FD_INTERVAL`` ends the agent with an error naming the variable.
"""

from __future__ import annotations

import asyncio
import logging

from gpu_operator.agents.nicfd.labels import NicView, compute_labels, label_changes
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.api.envtext import env_duration
from gpu_operator.names.network import NIC_FD_INTERVAL_ENV
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.types import DriverInfo, NicBackend
from gpu_operator.runtime.loop import LoopStats
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 60.0
MLX5_MODULE = "mlx5_core"


def parse_interval(text: str | None) -> float:
    """Seconds from ``60``, ``30s``, ``1m``, ``1h30m`` (100ms to 24h); ConfigRefusedError naming NIC_FD_INTERVAL."""
    value = env_duration(
        {NIC_FD_INTERVAL_ENV: text or ""}, NIC_FD_INTERVAL_ENV, default=DEFAULT_INTERVAL, minimum=0.1, maximum=86400.0
    )
    return DEFAULT_INTERVAL if value is None else value


def scan(backend: NicBackend) -> NicView:
    """Read what the labels need from the backend (blocking file reads: run it off the event loop)."""
    version = backend.module_version(MLX5_MODULE) if isinstance(backend, DriverInfo) else None
    return NicView(functions=list(backend.functions()), netns_mode=backend.netlink_rdma_mode(), driver_version=version)


async def publish_once(ctx: AgentContext, *, backend: NicBackend) -> dict[str, str]:
    """One pass: scan, compute, patch the Node's own labels when they changed; returns the labels."""
    view = await asyncio.to_thread(scan, backend)
    labels = compute_labels(view)
    if ctx.node is not None:
        changes = label_changes(current=await ctx.node.labels(), computed=labels)
        if changes:
            await ctx.node.patch_labels(changes)
    return labels


async def main(ctx: AgentContext) -> None:
    await run(ctx)


async def run(ctx: AgentContext) -> LoopStats:
    """Publish the labels every interval until the container is stopped."""
    interval = parse_interval(ctx.env.get(NIC_FD_INTERVAL_ENV))
    backend = open_nics(env=ctx.env, host_path=ctx.host_path)

    async def round_() -> None:
        labels = await publish_once(ctx, backend=backend)
        ctx.set_ready(True)
        log.debug("nic-feature-discovery[%s]: %d labels", ctx.node_name, len(labels))

    return await every(name=f"nic-feature-discovery[{ctx.node_name}]", seconds=interval, work=round_,
                       sleep=ctx.sleep)  # fmt: skip
