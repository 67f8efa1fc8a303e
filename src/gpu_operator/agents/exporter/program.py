"""``gpu-operator agent exporter``: DCGM-compatible GPU metrics on ``:9400/metrics``.

Environment (dcgm-exporter's names and defaults):

- ``DCGM_EXPORTER_LISTEN`` (``:9400``), ``DCGM_EXPORTER_INTERVAL`` (collection interval, ms, 30000);
- ``DCGM_EXPORTER_COLLECTORS``: the counter CSV (a container path, usually a ConfigMap volume; re-read
  when it changes). Unset: the built-in default counters;
- ``DCGM_EXPORTER_KUBERNETES`` (false): pod attribution through PodResources on
  ``DCGM_POD_RESOURCES_KUBELET_SOCKET`` (the context's own socket when unset, else the kubelet's
  path), with ``DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE`` (uid | device-name), ``KUBERNETES_VIRTUAL_GPUS``
  and ``NVIDIA_RESOURCE_NAMES``; ``DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS`` and ``..._POD_UID``
  add the pod's labels and ``pod_uid`` (read from the API server);
- ``NODE_NAME`` / ``DCGM_EXPORTER_NO_HOSTNAME`` for the ``Hostname`` label;
- ``DCGM_EXPORTER_WEB_CONFIG_FILE``: TLS and basic auth (``webconfig``). A broken web config stops the
  exporter instead of serving plain HTTP.

``/health`` answers ``OK`` once the server runs; the container is Ready after the first collection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.exporter.collector import Collector, CounterSource
from gpu_operator.agents.exporter.pods import PodMapper
from gpu_operator.agents.exporter.webconfig import load_web_config
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe, env_int
from gpu_operator.agents.shared.httpserver import HttpServer, Page, parse_listen
from gpu_operator.agents.shared.podresources import pod_resources_socket

DEFAULT_LISTEN = ":9400"
DEFAULT_INTERVAL_MS = 30000
#: How often the counter CSV is checked for changes between collections.
CSV_CHECK_SECONDS = 1.0
INDEX = b"<html><head><title>GPU exporter</title></head><body><a href='/metrics'>Metrics</a></body></html>\n"


def true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, kw_only=True)
class Settings:
    host: str
    port: int
    interval: float  # seconds
    collectors: Path | None
    kubernetes: bool
    socket: Path
    id_type: str
    virtual_gpus: bool
    resource_names: tuple[str, ...]
    pod_labels: bool
    pod_uid: bool
    hostname: str | None
    web_config: Path | None

    @classmethod
    def from_context(cls, ctx: AgentContext) -> Settings:
        env = ctx.env
        host, port = parse_listen(env.get("DCGM_EXPORTER_LISTEN") or DEFAULT_LISTEN)
        host = host or env.get("GPU_OPERATOR_BIND_ADDRESS", "")  # see agents/runtime.py
        # Milliseconds, ASCII digits only and bounded (a day): isdigit() took Arabic-Indic digits, int() 5000 digits.
        interval_ms = env_int(env, "DCGM_EXPORTER_INTERVAL", default=DEFAULT_INTERVAL_MS, minimum=1, maximum=86_400_000)
        id_type = env.get("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE") or "uid"
        if id_type not in ("uid", "device-name"):
            raise ConfigRefusedError(
                f"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE: expected uid or device-name, got {describe(id_type)}"
            )
        hostname = None
        if not true(env.get("DCGM_EXPORTER_NO_HOSTNAME")):
            hostname = env.get("NODE_NAME") or ctx.node_name or socket.gethostname()
        names = tuple(n.strip() for n in (env.get("NVIDIA_RESOURCE_NAMES") or "").split(",") if n.strip())
        collectors = env.get("DCGM_EXPORTER_COLLECTORS")
        web = env.get("DCGM_EXPORTER_WEB_CONFIG_FILE")
        return cls(
            host=host,
            port=port,
            interval=interval_ms / 1000.0,
            collectors=ctx.path(collectors) if collectors else None,
            kubernetes=true(env.get("DCGM_EXPORTER_KUBERNETES")),
            socket=pod_resources_socket(ctx, variable="DCGM_POD_RESOURCES_KUBELET_SOCKET"),
            id_type=id_type,
            virtual_gpus=true(env.get("KUBERNETES_VIRTUAL_GPUS")),
            resource_names=names,
            pod_labels=true(env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS")),
            pod_uid=true(env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID")),
            hostname=hostname,
            web_config=ctx.path(web) if web else None,
        )


class Exporter:
    """The collector and the HTTP server of one node; ``main`` runs it, tests drive it directly."""

    def __init__(
        self, ctx: AgentContext, *, settings: Settings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ctx = ctx
        self.settings = s = settings or Settings.from_context(ctx)
        self.name = f"exporter[{ctx.node_name}]"
        pods = (
            PodMapper(
                socket=s.socket,
                timeout=min(10.0, max(1.0, s.interval)),
                extra_resources=s.resource_names,
                name=self.name,
                cluster=cluster_of(ctx),
                labels=s.pod_labels,
                uid=s.pod_uid,
            )
            if s.kubernetes
            else None
        )
        self.collector = Collector(
            backend=ctx.gpu,
            counters=CounterSource(path=s.collectors, name=self.name),
            pods=pods,
            hostname=s.hostname,
            id_type=s.id_type,
            virtual_gpus=s.virtual_gpus,
            name=self.name,
            clock=clock,
        )
        web = load_web_config(s.web_config, container_path=ctx.path) if s.web_config else None
        health = Page(b"OK\n")
        index = Page(INDEX, content_type="text/html; charset=utf-8")
        self.server = HttpServer(
            host=s.host,
            port=s.port,
            routes={"/metrics": lambda: self.collector.page, "/health": lambda: health, "/": lambda: index},
            ssl_context=web.tls.context() if web and web.tls else None,
            auth=web.auth if web else None,
            name=self.name,
        )

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def run(self) -> None:
        """Collect every interval (and at once when the counter CSV changed) until the context stops."""
        clock = self.collector.clock
        due = clock()
        while True:
            if clock() >= due or self.collector.counters.changed():
                await self.collector.collect()
                self.ctx.set_ready(self.collector.ok)
                due = clock() + self.settings.interval
            # Wake up early only to look at the counter CSV; without one, sleep until the next collection
            # (a simulator runs thousands of exporters in one process).
            step = due - clock() if self.settings.collectors is None else min(CSV_CHECK_SECONDS, due - clock())
            if await self.ctx.sleep(max(0.0, step)):
                return

    async def close(self) -> None:
        await self.server.close()


async def main(ctx: AgentContext) -> None:
    """Serve metrics until the container is stopped."""
    exporter = Exporter(ctx)
    await exporter.start()
    try:
        await exporter.run()
    finally:
        await exporter.close()
