"""``gpu-operator agent rdma-shared-dp``: the RDMA shared device plugin (k8s-rdma-shared-dev-plugin's job).

Environment:

* ``RDMA_DP_CONFIG``: the config file inside the container (default ``/k8s-rdma-shared-dev-plugin/config.json``,
  upstream's path; format in ``config``). A config that cannot be used at start ends the program with
  a one-line error naming the file and field, as upstream exits; later edits are picked up at each
  re-discovery, and a broken one keeps the last good one serving: each new bad version is logged once,
  counted (``Discovery.config_log.failures``) and reported in a ``ConfigRefused`` Event on the Node.
* ``RDMA_DP_USE_CDI``: ``true`` answers Allocate with CDI device names and writes the spec (``cdi``) to
  ``CDI_SPEC_DIR`` (default ``/var/run/cdi``, the host's directory mounted there).
* NIC discovery through ``gpu_operator.nic`` (``NIC_BACKEND``, ``NIC_SYSFS_ROOT``, ``NIC_DEV_ROOT``; by default
  the host's ``/sys`` and ``/dev`` under ``HOST_ROOT``).

The RDMA subsystem must be in shared network-namespace mode: in ``exclusive`` mode a pod's namespace
cannot see the host's RDMA devices, so the program refuses to start (as upstream). Where the kernel does
not answer (no NETLINK_RDMA) the mode is taken as shared. Discovery is repeated every
``periodicUpdateInterval`` seconds (0: never); serving, registration and kubelet restarts are
``agents.shared.netplugin``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from gpu_operator.agents.rdmadp import cdi
from gpu_operator.agents.rdmadp.config import RdmaConfig, RdmaConfigError, load_config
from gpu_operator.agents.rdmadp.source import RdmaSource, make_sources
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import ReloadLog
from gpu_operator.agents.shared.netplugin import PluginSource, serve_plugins
from gpu_operator.nic.open import open_nics
from gpu_operator.nic.types import NicBackend

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "/k8s-rdma-shared-dev-plugin/config.json"
_TRUE = ("1", "true", "yes", "on")


class RdmaPluginError(RuntimeError):
    """The plugin cannot run on this node; the message says why."""


def env_flag(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def check_netns_mode(nics: NicBackend, *, name: str) -> None:
    """Refuse the exclusive RDMA netns mode; an unknown mode is taken as shared (logged)."""
    mode = nics.netlink_rdma_mode()
    if mode == "exclusive":
        raise RdmaPluginError(
            f"{name}: the RDMA subsystem is in exclusive network-namespace mode, so pods cannot share the "
            "HCAs; switch it to shared (rdma system set netns shared, or the ib_core module parameter "
            "netns_mode=1) or use the SR-IOV device plugin"
        )
    if mode != "shared":
        log.info("%s: RDMA netns mode not reported by this kernel (%s); assuming shared", name, mode)


class Discovery:
    """The loader ``serve_plugins`` calls: config (re-read, last good kept), NICs, sources, CDI spec."""

    def __init__(self, *, ctx: AgentContext, nics: NicBackend, config: RdmaConfig, name: str) -> None:
        self.ctx = ctx
        self.nics = nics
        self.config = config
        self.name = name
        self.use_cdi = env_flag(ctx.env.get("RDMA_DP_USE_CDI"))
        self.config_path = ctx.path(ctx.env.get("RDMA_DP_CONFIG") or DEFAULT_CONFIG)
        self.config_log = ReloadLog(name=name, source=str(self.config_path), events=cluster_of(ctx))
        self.config_log.accepted()  # ``config`` is the good one read at start
        self._summary: tuple[tuple[str, tuple[str, ...]], ...] | None = None

    def _reload_config(self) -> None:
        try:
            config = load_config(self.config_path)
        except RdmaConfigError as error:
            self.config_log.refused(str(error))  # the NICs are still rediscovered with the last good config
            return
        self.config_log.accepted()
        if config != self.config:
            log.info("%s: config changed", self.name)
            for warning in config.warnings:
                log.warning("%s: %s", self.name, warning)
            self.config = config

    def sources(self) -> list[RdmaSource]:
        functions = self.nics.functions()
        sources = make_sources(config=self.config, functions=functions, use_cdi=self.use_cdi)
        summary = tuple((s.resource_name, tuple(f.address for f in s.matched)) for s in sources)
        if summary != self._summary:
            for source in sources:
                log.info(
                    "%s: %s matches %s (%d char devices)",
                    self.name, source.resource_name,
                    ", ".join(f.address for f in source.matched) or "nothing", len(source.char_devices),
                )  # fmt: skip
            self._summary = summary
        if self.use_cdi:
            spec_dir = self.ctx.path(self.ctx.env.get("CDI_SPEC_DIR") or cdi.DEFAULT_SPEC_DIR)
            if cdi.publish(spec_dir=spec_dir, functions=[f for s in sources for f in s.matched]):
                log.info("%s: CDI spec %s updated", self.name, spec_dir / cdi.SPEC_FILE)
        return sources

    def __call__(self) -> Sequence[PluginSource]:
        self._reload_config()
        return self.sources()


async def main(ctx: AgentContext) -> None:
    """Run the RDMA shared device plugin until the container is stopped."""
    name = f"rdma-shared-dp[{ctx.node_name}]"
    path = ctx.path(ctx.env.get("RDMA_DP_CONFIG") or DEFAULT_CONFIG)
    config = load_config(path)  # RdmaConfigError ends the program, naming the file and field
    for warning in config.warnings:
        log.warning("%s: %s", name, warning)
    nics = open_nics(env=ctx.env, host_path=ctx.host_path)
    await asyncio.to_thread(check_netns_mode, nics, name=name)
    discovery = Discovery(ctx=ctx, nics=nics, config=config, name=name)
    interval = config.periodic_update_seconds
    log.info(
        "%s: %d resources; re-discovery %s", name, len(config.resources), f"every {interval}s" if interval else "off"
    )
    await serve_plugins(
        ctx=ctx, load=discovery, refresh_seconds=float(interval), name=name, reload=discovery.config_log
    )
