"""``gpu-operator agent device-plugin``: the plugin as an agent program.

Settings come from the node's named config (``agents.shared.nodeconfig``: the environment,
``CONFIG_FILE`` or the ConfigMap key named by the node's ``nvidia.com/device-plugin.config`` label).
Both the label and the files are re-read on every pass, so a change reconfigures the plugin without a
pod restart.

Health settings (``DP_DISABLE_HEALTHCHECKS``, ``DP_ENABLE_HEALTHCHECKS``, ``DP_RECOVER_ON_RESET``,
``DP_RECOVER_QUIET_SECONDS``) are described in ``health``; health changes become Events on the Node
(through ``ctx.cluster`` when the context has one) and metrics (``healthreport``) served on
``DP_METRICS_LISTEN`` (``host:port``, e.g. ``:9402``; unset: no metrics endpoint) at ``/metrics``, with
``gpu_operator_device_plugin_config_reload_failures_total`` (new bad config versions refused while the
last good one kept serving). ``DP_RECONCILE_INTERVAL`` (seconds, 0.05 to 3600) that is not a number is
refused at start with a one-line error naming it.
"""

from __future__ import annotations

import asyncio
import logging

from gpu_operator.agents.deviceplugin import cdispec
from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import env_seconds
from gpu_operator.agents.shared.httpserver import METRICS_CONTENT_TYPE, HttpServer, Page, parse_listen
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
        interval=env_seconds(ctx.env, "DP_RECONCILE_INTERVAL", default=1.0, minimum=0.05, maximum=3600.0),
        name=f"device-plugin[{ctx.node_name}]",
        events=cluster_of(ctx),
    )
    metrics = _metrics_server(ctx, plugin)
    if metrics is not None:
        await metrics.start()
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
        if metrics is not None:
            await metrics.close()


def _metrics_server(ctx: AgentContext, plugin: DevicePlugin) -> HttpServer | None:
    listen = ctx.env.get("DP_METRICS_LISTEN", "").strip()
    if not listen:
        return None
    host, port = parse_listen(listen, variable="DP_METRICS_LISTEN")
    host = host or ctx.env.get("GPU_OPERATOR_BIND_ADDRESS", "")  # see agents/runtime.py
    health = Page(b"OK\n")
    return HttpServer(
        host=host,
        port=port,
        routes={
            "/metrics": lambda: Page(
                (plugin.report.render() + plugin.config_log.render()).encode(), content_type=METRICS_CONTENT_TYPE
            ),
            "/health": lambda: health,
        },
        name=f"device-plugin-metrics[{ctx.node_name}]",
    )
