"""``gpu-operator agent device-plugin``: the plugin as an agent program.

Settings come from, in order: the command-line style overrides in the environment, ``CONFIG_FILE``
(a single config file) or, for per-node configuration, the directory of named configs
``CONFIG_FILE_SRCDIR`` (a mounted ConfigMap) with the key named by the node's
``nvidia.com/device-plugin.config`` label, falling back to ``DEFAULT_CONFIG``. Both the label and
the files are re-read on every pass, so a change reconfigures the plugin without a pod restart.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from gpu_operator.agents.deviceplugin import cdispec
from gpu_operator.agents.deviceplugin.config import ConfigError, ConfigFile, Settings, load_config
from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.gpu.backend import GpuError

log = logging.getLogger(__name__)

CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: The CDI spec is checked every 60 s (120 ticks of 0.5 s); it is only rewritten when it changed.
CDI_REFRESH_TICKS = 120


def _publish_cdi(ctx: AgentContext, settings: Settings) -> None:
    try:
        cdispec.publish(ctx=ctx, backend=ctx.gpu, settings=settings)
    except (OSError, GpuError) as error:  # the next refresh tries again; Allocate works without it on envvar
        log.warning("device-plugin[%s]: CDI spec not written: %s", ctx.node_name, error)


class NamedConfigs:
    """Picks the config file for this node from the environment, the mounted configs and the label."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.last_feature: dict[str, object] | None = None  # GFD's last NodeFeature, to skip no-op writes

    async def _selected(self) -> Path | None:
        env = self.ctx.env
        if env.get("CONFIG_FILE") and not env.get("CONFIG_FILE_SRCDIR"):
            return self.ctx.path(env["CONFIG_FILE"])
        srcdir = env.get("CONFIG_FILE_SRCDIR")
        if not srcdir:
            return None
        name = ""
        if self.ctx.node is not None:
            name = (await self.ctx.node.labels()).get(env.get("NODE_LABEL", CONFIG_LABEL), "")
        name = name or env.get("DEFAULT_CONFIG", "")
        if not name:
            return None
        path = self.ctx.path(srcdir) / name
        if not path.exists():
            raise ConfigError(f"{CONFIG_LABEL}={name}: no such config in {srcdir} (keys are the ConfigMap's data)")
        return path

    async def settings(self) -> Settings:
        path = await self._selected()
        config: ConfigFile | None = await asyncio.to_thread(load_config, path) if path else None
        return Settings.resolve(config=config, env=self.ctx.env)


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
