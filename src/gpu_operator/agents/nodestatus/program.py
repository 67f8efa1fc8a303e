"""``gpu-operator agent node-status-exporter``: validation results of this node as Prometheus gauges.

Upstream runs this as the validator's ``metrics`` component on port 8000. Metrics (prefix
``gpu_operator_node_``): ``driver_ready``, ``toolkit_ready``, ``cuda_ready``, ``plugin_ready`` (1 when
the component's file exists under ``/run/nvidia/validations``, else 0) and
``device_plugin_devices_total`` (allocatable ``nvidia.com/gpu`` plus ``nvidia.com/mig-*``, left out
while it cannot be read).

Environment: ``METRICS_PORT`` (8000) or ``NODE_STATUS_EXPORTER_LISTEN`` (``host:port``, wins),
``OUTPUT_DIR`` (the validations directory) and ``SLEEP_INTERVAL_SECONDS`` (5: how often the files
and the allocatable count are read). As in the GPU exporter, scrapes serve the page rendered by the
last refresh, through the same HTTP server.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.allocatable import AllocatableError, allocatable_gpus
from gpu_operator.agents.shared.httpserver import METRICS_CONTENT_TYPE, HttpServer, Page, parse_listen
from gpu_operator.agents.shared.validations import OUTPUT_DIR, READY_FILES, StatusDir
from gpu_operator.api.envtext import env_duration, env_path

log = logging.getLogger(__name__)
PREFIX = "gpu_operator_node_"
DEFAULT_PORT = 8000
DEFAULT_INTERVAL = 5.0
_HELP: Mapping[str, str] = MappingProxyType(
    {
        "driver": "1 when the driver validation passed on this node (driver-ready exists), else 0.",
        "toolkit": "1 when the container toolkit validation passed on this node (toolkit-ready exists), else 0.",
        "cuda": "1 when the CUDA workload validation passed on this node (cuda-ready exists), else 0.",
        "plugin": "1 when the device plugin validation passed on this node (plugin-ready exists), else 0.",
    }
)


def render_status(*, ready: Mapping[str, bool], devices: int | None) -> str:
    """The exposition text for one node."""
    lines: list[str] = []
    for component in READY_FILES:
        name = f"{PREFIX}{component}_ready"
        lines += [f"# HELP {name} {_HELP[component]}", f"# TYPE {name} gauge", f"{name} {int(ready[component])}"]
    if devices is not None:
        name = f"{PREFIX}device_plugin_devices_total"
        lines += [
            f"# HELP {name} GPU devices (nvidia.com/gpu and nvidia.com/mig-*) allocatable on this node.",
            f"# TYPE {name} gauge",
            f"{name} {devices}",
        ]
    return "\n".join(lines) + "\n"


def sleep_interval(env: Mapping[str, str]) -> float:
    """``SLEEP_INTERVAL_SECONDS``: seconds (``5``) or a duration (``5s``) from 100ms to 1h between refreshes."""
    value = env_duration(env, "SLEEP_INTERVAL_SECONDS", default=DEFAULT_INTERVAL, minimum=0.1, maximum=3600.0)
    return DEFAULT_INTERVAL if value is None else value


class NodeStatusExporter:
    """Refreshes the page every interval; ``main`` runs it, tests drive it directly."""

    def __init__(self, ctx: AgentContext) -> None:
        env = ctx.env
        self.ctx = ctx
        listen = env.get("NODE_STATUS_EXPORTER_LISTEN") or f":{env.get('METRICS_PORT') or DEFAULT_PORT}"
        host, port = parse_listen(listen, variable="NODE_STATUS_EXPORTER_LISTEN/METRICS_PORT")
        host = host or env.get("GPU_OPERATOR_BIND_ADDRESS", "")  # see agents/runtime.py
        self.interval = sleep_interval(env)
        self.status = StatusDir(ctx.host_path(env_path(env, "OUTPUT_DIR", default=OUTPUT_DIR)))
        self.name = f"node-status-exporter[{ctx.node_name}]"
        self.page = Page(b"", content_type=METRICS_CONTENT_TYPE)
        health = Page(b"OK\n")
        self.server = HttpServer(
            host=host,
            port=port,
            routes={"/metrics": lambda: self.page, "/health": lambda: health},
            name=self.name,
        )
        self._device_error: str | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def refresh(self) -> None:
        devices: int | None = None
        try:
            gpus, _ = await allocatable_gpus(self.ctx)
            devices = sum(gpus.values())
            self._device_error = None
        except AllocatableError as exc:
            if str(exc) != self._device_error:  # say it once per distinct problem, not every interval
                log.warning("%s: device count unavailable: %s", self.name, exc)
                self._device_error = str(exc)
        self.page = Page(
            render_status(ready=self.status.ready(), devices=devices).encode(), content_type=METRICS_CONTENT_TYPE
        )

    async def run(self) -> None:
        await self.server.start()
        try:
            while True:
                await self.refresh()
                self.ctx.set_ready(True)
                if await self.ctx.sleep(self.interval):
                    return
        finally:
            await self.server.close()


async def main(ctx: AgentContext) -> None:
    """Serve the node's validation status until the container is stopped."""
    await NodeStatusExporter(ctx).run()
