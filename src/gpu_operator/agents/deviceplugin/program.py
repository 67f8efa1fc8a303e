"""``gpu-operator agent device-plugin``: the plugin as an agent program.

Settings come from the node's named config (``agents.shared.nodeconfig``: the environment,
``CONFIG_FILE`` or the ConfigMap key named by the node's ``nvidia.com/device-plugin.config`` label).
Both the label and the files are re-read on every pass, so a change reconfigures the plugin without a
pod restart.
"""

from __future__ import annotations

import asyncio
import logging

from gpu_operator.agents.deviceplugin import cdispec
from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.gpu.backend import GpuError

log = logging.getLogger(__name__)

#: The CDI spec is checked every 60 s (120 ticks of 0.5 s); it is only rewritten when it changed.
CDI_REFRESH_TICKS = 120


def _publish_cdi(ctx: AgentContext, settings: Settings) -> None:
    try:
        cdispec.publish(ctx=ctx, backend=ctx.gpu, settings=settings)
    except (OSError, GpuError) as error:  # the next refresh tries again; Allocate works without it on envvar
        log.warning("device-plugin[%s]: CDI spec not written: %s", ctx.node_name, error)


async def main(ctx: AgentContext) -> None:
    """Run the device plugin until the container is stopped."""
    configs = NamedConfigs(ctx)
    plugin = DevicePlugin(
        backend=ctx.gpu,
        settings=configs.settings,
        plugin_dir=ctx.plugin_dir,
        env=ctx.env,
        interval=float(ctx.env.get("DP_RECONCILE_INTERVAL", "1.0")),
        name=f"device-plugin[{ctx.node_name}]",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(plugin.run(stop=stop))
    ticks = 0
    published: Settings | None = None
    try:
        while not await ctx.sleep(0.5):
            settings = plugin.settings  # what the plugin serves with (it re-reads the config itself)
            if settings is not None and (settings is not published or ticks % CDI_REFRESH_TICKS == 0):
                # The devices the Allocate responses name must exist in a CDI spec before a pod asks.
                await asyncio.to_thread(_publish_cdi, ctx, settings)
                published = settings
            ticks += 1
            ctx.set_ready(bool(plugin.servers) and plugin.registrations > 0)
            if task.done():
                break
    finally:
        stop.set()
        await task
