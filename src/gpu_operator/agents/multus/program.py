"""``gpu-operator agent multus``: secondary networks for pods, as Multus gives them (a hostNetwork DaemonSet).

1. Serve the shim's requests on ``/var/lib/cni/gpu-operator/multus.sock`` (``service``);
2. install the shim as ``/opt/cni/bin/gpu-operator-multus`` and, once the node's own network conf is
   there, our conf ``/etc/cni/net.d/00-gpu-operator-multus.conflist`` wrapping it (``install``);
   Ready from then on. The shim runs with the node's ``python3``: without one (:data:`PYTHON3_PATHS`)
   no conf is written (ours is removed: every pod's ADD would fail, the cluster network's too), an
   error names the paths looked at and the agent is not ready; a failed write (OSError) is logged,
   not ready too; both are tried again next resync. A bad ``MULTUS_RESYNC_SECONDS`` or
   ``MULTUS_SHIM_TIMEOUT_SECONDS`` is an error naming it at start;
3. every ``MULTUS_RESYNC_SECONDS`` (default 10): check python3, install the shim and write the conf
   again if the node's network changed (or someone removed ours);
4. asked to stop: remove our conf (if it still is ours), then stop serving. Upstream's DaemonSet does
   the same (``--cleanup-config-on-exit``): the shim cannot work without this agent, and a conf left
   behind would fail every new pod of the node once the agent is gone for good (the policy's
   ``secondaryNetwork.multus`` removed). The price, as upstream's: pods created while the agent
   restarts get the cluster network alone. The shim is left: it runs only when a conf names it, and a
   pod deleted later still finds its per-container cache.

Host paths are node paths through ``ctx.host_path`` (``HOST_ROOT=/host`` in the container). The API is
the kube layer's client (the pod's service account), PodResources the kubelet's socket.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

from gpu_operator.agents.multus import install, shim
from gpu_operator.agents.multus.service import KubeMultusApi, MultusApi, MultusService, PoolApi, start_server
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.podresources import OwnPodResources
from gpu_operator.kube.client import KubeClient
from gpu_operator.kubelet.allocation import PodDevices
from gpu_operator.kubelet.paths import POD_RESOURCES_SOCKET
from gpu_operator.kubelet.podresources import list_pod_resources

log = logging.getLogger(__name__)
CNI_CONF_DIR = "/etc/cni/net.d"
CNI_BIN_DIR = "/opt/cni/bin"
STATE_DIR = "/var/lib/cni/gpu-operator"
SOCKET = f"{STATE_DIR}/multus.sock"
CACHE_DIR = f"{STATE_DIR}/cache"
AGENT = "gpu-operator-multus"
#: Where nv-ipam's IPPools are read when ``IPPOOLS_NAMESPACE`` is unset (the chart's namespace).
DEFAULT_POOL_NAMESPACE = "nvidia-network-operator"


def kube_client(ctx: AgentContext) -> KubeClient:
    """The API client: the context's own (tests, the simulator's nodes) or the pod's service account."""
    given = getattr(ctx, "kube_client", None)
    if given is not None:
        return given  # type: ignore[no-any-return]
    cluster = cluster_of(ctx)
    rest = getattr(cluster, "api", None)
    if rest is not None:  # the simulator's RestCluster: its pooled JSON client
        from gpu_operator.kube.restkube import RestKube  # noqa: PLC0415

        return RestKube(rest, field_manager=AGENT)
    from gpu_operator.kube.api import Kube  # noqa: PLC0415 - only where an API server is
    from gpu_operator.kube.connect import async_client  # noqa: PLC0415

    return Kube(async_client(field_manager=AGENT), field_manager=AGENT)


def pod_resources_socket(ctx: AgentContext) -> Path:
    configured = ctx.env.get("MULTUS_POD_RESOURCES_SOCKET")
    if configured:
        return ctx.path(configured)
    if isinstance(ctx, OwnPodResources):
        return Path(ctx.pod_resources_socket)
    return ctx.host_path(str(POD_RESOURCES_SOCKET))


def build_service(ctx: AgentContext, *, api: MultusApi | None = None) -> MultusService:
    socket = pod_resources_socket(ctx)

    async def pod_resources() -> Sequence[PodDevices]:
        return await list_pod_resources(socket=socket)

    chosen = api or KubeMultusApi(kube_client(ctx))
    return MultusService(
        api=chosen, pod_resources=pod_resources, host_path=ctx.host_path,
        pools=chosen if isinstance(chosen, PoolApi) else None, node_name=ctx.node_name,
        pool_namespace=ctx.env.get("IPPOOLS_NAMESPACE") or DEFAULT_POOL_NAMESPACE,
    )  # fmt: skip


#: Where the shim's ``#!/usr/bin/env python3`` may find its interpreter on the node (node paths; the
#: DaemonSet mounts the host's ``/usr`` read-only for this look, and ``/bin`` is ``/usr/bin`` on merged-usr hosts).
PYTHON3_PATHS = ("/usr/bin/python3", "/usr/local/bin/python3")
DEFAULT_RESYNC_SECONDS = 10.0


def env_seconds(ctx: AgentContext, variable: str, default: float) -> float:
    """A positive number of seconds from ``variable`` (unset or empty: ``default``); a ValueError naming it."""
    raw = ctx.env.get(variable) or ""
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigRefusedError(f"{variable}: not a number of seconds: {raw[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigRefusedError(f"{variable}: must be a positive number of seconds (got {raw[:40]!r})")
    return value


def host_python3(ctx: AgentContext) -> str | None:
    """The node path of a python3 the shim can run with, or None. A link counts as found without being
    followed: an absolute target is a node path, not one of this container."""
    for node_path in PYTHON3_PATHS:
        if os.path.lexists(ctx.host_path(node_path)):
            return node_path
    return None


def sync_conf(ctx: AgentContext, *, conf_dir: Path, timeout: float = shim.DEFAULT_TIMEOUT) -> bytes | None:
    """Write our conf for the node's current network; what it holds, or None while there is none."""
    try:
        source, cluster = install.cluster_network(conf_dir)
    except install.ClusterNetworkError as error:
        log.warning("multus: %s", error)
        return None
    conf = install.multus_conf(cluster=cluster, socket=SOCKET, cache_dir=CACHE_DIR, timeout_seconds=timeout)
    text = install.conf_text(conf)
    if install.write_atomic(conf_dir / install.CONF_NAME, text):
        log.info("multus: %s written, wrapping %s (%s)", install.CONF_NAME, source.name, cluster.get("name"))
    return text


def sync(ctx: AgentContext, *, conf_dir: Path, timeout: float, written: bytes | None) -> tuple[bool, bytes | None]:
    """One round: check the node's python3, install the shim, write our conf. Whether the agent is ready
    and the conf it last wrote. Without python3 every pod's ADD would fail (the cluster network's too),
    so there is no conf then (ours is removed); an OSError is logged: not ready, tried again next round."""
    if host_python3(ctx) is None:
        looked = ", ".join(str(ctx.host_path(p)) for p in PYTHON3_PATHS)
        log.error(
            "multus: the node has no python3 for the CNI shim (looked at %s): no %s is written and pods "
            "get the cluster network alone; checked again every resync",
            looked,
            install.CONF_NAME,
        )
        try:
            if install.remove_conf(conf_dir, written=written):
                log.info("multus: %s removed", install.CONF_NAME)
        except OSError as error:
            log.error("multus: cannot remove %s: %s", conf_dir / install.CONF_NAME, error)
            return False, written
        return False, None
    try:
        if install.install_shim(ctx.host_path(CNI_BIN_DIR)):
            log.info("multus: shim installed as %s/%s", CNI_BIN_DIR, shim.TYPE)
        text = sync_conf(ctx, conf_dir=conf_dir, timeout=timeout)
    except OSError as error:
        log.error("multus: installing the shim or writing %s failed: %s (tried again next resync)",
                  install.CONF_NAME, error)  # fmt: skip
        return False, written
    written = text or written
    return written is not None, written


async def main(ctx: AgentContext, *, api: MultusApi | None = None) -> None:
    resync = env_seconds(ctx, "MULTUS_RESYNC_SECONDS", DEFAULT_RESYNC_SECONDS)
    timeout = env_seconds(ctx, "MULTUS_SHIM_TIMEOUT_SECONDS", shim.DEFAULT_TIMEOUT)
    conf_dir = ctx.host_path(CNI_CONF_DIR)
    service = build_service(ctx, api=api)
    server = await start_server(service, socket_path=ctx.host_path(SOCKET))
    written: bytes | None = None
    try:
        while True:
            ready, written = sync(ctx, conf_dir=conf_dir, timeout=timeout, written=written)
            ctx.set_ready(ready)
            if await ctx.sleep(resync):
                break
    finally:
        try:
            if install.remove_conf(conf_dir, written=written):
                log.info("multus: %s removed", install.CONF_NAME)
        except OSError as error:
            log.error("multus: cannot remove %s: %s", conf_dir / install.CONF_NAME, error)
        ctx.set_ready(False)
        server.close()
        await server.wait_closed()
        ctx.host_path(SOCKET).unlink(missing_ok=True)
