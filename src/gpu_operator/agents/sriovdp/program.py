"""``gpu-operator agent sriov-dp``: the SR-IOV network device plugin as an agent program.

Environment (container paths through ``ctx.path``, node paths through ``ctx.host_path``):

* ``SRIOV_DP_CONFIG``: the config file (default ``/etc/pcidp/config.json``; format in ``config``).
* ``SRIOV_DP_RESOURCE_PREFIX``: the prefix of resources that name none (upstream's
  ``--resource-prefix``, default ``intel.com``).
* ``SRIOV_DP_DEVINFO_DIR``: where device-info files go (default ``/var/run/k8s.cni.cncf.io/devinfo/dp``).
* ``SRIOV_DP_USE_CDI=true``: answer Allocate with CDI annotations and write one CDI spec per resource
  under ``CDI_SPEC_DIR`` (default ``/var/run/cdi``); stale ``sriov-dp-*`` specs are removed at start.
* ``SRIOV_DP_REFRESH_SECONDS``: re-read the config and rediscover NICs this often (default 60; 0: once,
  as upstream, which discovers only at start).
* ``NIC_BACKEND``, ``NIC_SYSFS_ROOT``, ``NIC_DEV_ROOT``: the NIC backend (``gpu_operator.nic.open``).

Interfaces carrying the default route are never handed out: their names come from the host's
``/proc/net/route`` (``<host>/proc/net/route``, else the container's own, which is the host's in a
hostNetwork pod). Serving, registration and kubelet restarts are ``agents.shared.netplugin``'s; a
resource whose pool is empty is not served (upstream starts no server for it), and a config with no
resources serves nothing and stays ready (upstream exits; a DaemonSet would restart it forever). A bad
config is refused with a one-line error naming its file and field: the previous resources keep serving
(before any good config, nothing is served and the agent is not ready, re-reading the file until it is
fixed, rather than crash-looping); each new bad version is logged once, counted
(``Loader.config_log.failures``) and reported in a ``ConfigRefused`` Event on the Node.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import ReloadLog, env_seconds
from gpu_operator.agents.shared.netplugin import serve_plugins
from gpu_operator.agents.sriovdp import allocate, config, discovery, selectors
from gpu_operator.agents.sriovdp.source import PoolSource, pool_devices, remove_cdi_specs
from gpu_operator.nic.open import open_nics

log = logging.getLogger(__name__)

NAME = "sriov-dp"
DEFAULT_CDI_DIR = "/var/run/cdi"
DEFAULT_REFRESH_SECONDS = 60.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class Loader:
    """``load()`` for ``serve_plugins``: config + discovery -> one :class:`PoolSource` per non-empty pool."""

    def __init__(self, ctx: AgentContext) -> None:
        env = ctx.env
        self.ctx = ctx
        self.config_name = env.get("SRIOV_DP_CONFIG") or config.DEFAULT_CONFIG
        self.config_path = ctx.path(self.config_name)
        self.prefix = env.get("SRIOV_DP_RESOURCE_PREFIX") or config.DEFAULT_PREFIX
        self.devinfo_dir = ctx.path(env.get("SRIOV_DP_DEVINFO_DIR") or allocate.DEVINFO_DIR)
        self.use_cdi = _truthy(env.get("SRIOV_DP_USE_CDI"))
        self.cdi_dir = ctx.path(env.get("CDI_SPEC_DIR") or DEFAULT_CDI_DIR)
        self.sources: list[PoolSource] = []
        self._cleaned: set[tuple[str, str]] = set()
        self._warned: set[str] = set()
        self.config_log = ReloadLog(name=f"{NAME}[{ctx.node_name}]", source=self.config_name, events=cluster_of(ctx))

    def _default_route(self) -> frozenset[str]:
        for path in (self.ctx.host_path("/proc/net/route"), self.ctx.path("/proc/net/route")):
            try:
                return discovery.default_route_interfaces(path.read_text(encoding="utf-8"))
            except OSError:
                continue
        return frozenset()

    def _vhost_net_present(self) -> bool:
        dev_root = self.ctx.env.get("NIC_DEV_ROOT")
        root = Path(dev_root) if dev_root else self.ctx.host_path("/dev")
        return (root / "vhost-net").exists()

    def __call__(self) -> list[PoolSource]:
        try:
            parsed = config.load_config(self.config_path, source=self.config_name, default_prefix=self.prefix)
        except config.ConfigError as error:
            self.config_log.refused(str(error))
            raise  # the runner keeps the previous sources serving
        self.config_log.accepted()
        for warning in parsed.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                log.warning("%s[%s]: %s", NAME, self.ctx.node_name, warning)
        backend = open_nics(env=self.ctx.env, host_path=self.ctx.host_path)
        found = discovery.candidates(backend.functions(), default_route=self._default_route())
        vhost = self._vhost_net_present()
        sources = [
            PoolSource(
                resource=pool.resource,
                devices=pool_devices(pool, vhost_net_present=vhost),
                devinfo_dir=self.devinfo_dir,
                use_cdi=self.use_cdi,
            )
            for pool in selectors.build_pools(parsed, found)
        ]
        served = {s.resource_name for s in sources}
        for resource in parsed.resources:
            if resource.full_name not in served:
                log.info("%s[%s]: no devices for %s; not served", NAME, self.ctx.node_name, resource.full_name)
        self._prepare(sources)
        self.sources = sources
        return sources

    def _prepare(self, sources: list[PoolSource]) -> None:
        """Remove stale device-info files of newly served devices; keep the CDI specs current."""
        for source in sources:
            fresh = [a for a in source.pool if (source.resource_name, a) not in self._cleaned]
            source.clean_device_info(fresh)
            self._cleaned.update((source.resource_name, a) for a in fresh)
            if self.use_cdi and source.write_cdi_spec(self.cdi_dir):
                log.info("%s[%s]: CDI spec %s written", NAME, self.ctx.node_name, source.cdi_spec_path(self.cdi_dir))
        if self.use_cdi:
            kept = {s.cdi_spec_path(self.cdi_dir) for s in sources}
            for old in self.sources:
                if old.cdi_spec_path(self.cdi_dir) not in kept:
                    old.cdi_spec_path(self.cdi_dir).unlink(missing_ok=True)

    def close(self) -> None:
        """At exit, as upstream's server stop: the served pools' device-info files go."""
        for source in self.sources:
            source.clean_device_info()


async def main(ctx: AgentContext) -> None:
    loader = Loader(ctx)
    refresh = env_seconds(ctx.env, "SRIOV_DP_REFRESH_SECONDS", default=DEFAULT_REFRESH_SECONDS, maximum=86400.0)
    if loader.use_cdi:
        remove_cdi_specs(loader.cdi_dir)
    log.info("%s[%s]: config %s, devinfo %s", NAME, ctx.node_name, loader.config_path, loader.devinfo_dir)
    try:
        await serve_plugins(ctx=ctx, load=loader, refresh_seconds=refresh, name=NAME, reload=loader.config_log)
    finally:
        loader.close()
