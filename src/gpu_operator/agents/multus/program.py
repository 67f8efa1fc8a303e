"""``gpu-operator agent multus``: secondary networks for pods, as Multus gives them (a hostNetwork DaemonSet).

1. Serve the shim's requests on ``/var/lib/cni/gpu-operator/multus.sock`` (``service``);
2. install the shim as ``/opt/cni/bin/gpu-operator-multus`` and, once the node's own network conf is
   there, our conf ``/etc/cni/net.d/00-gpu-operator-multus.conflist`` wrapping it (``install``);
   Ready from then on;
3. every ``MULTUS_RESYNC_SECONDS`` (default 10): write the conf again if the node's network changed
   (or someone removed ours);
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
from collections.abc import Sequence
from pathlib import Path

from gpu_operator.agents.multus import install, shim
from gpu_operator.agents.multus.service import KubeMultusApi, MultusApi, MultusService, PoolApi, start_server
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
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


def sync_conf(ctx: AgentContext, *, conf_dir: Path) -> bytes | None:
    """Write our conf for the node's current network; what it holds, or None while there is none."""
    try:
        source, cluster = install.cluster_network(conf_dir)
    except install.ClusterNetworkError as error:
        log.warning("multus: %s", error)
        return None
    timeout = float(ctx.env.get("MULTUS_SHIM_TIMEOUT_SECONDS") or shim.DEFAULT_TIMEOUT)
    conf = install.multus_conf(cluster=cluster, socket=SOCKET, cache_dir=CACHE_DIR, timeout_seconds=timeout)
    text = install.conf_text(conf)
    if install.write_atomic(conf_dir / install.CONF_NAME, text):
        log.info("multus: %s written, wrapping %s (%s)", install.CONF_NAME, source.name, cluster.get("name"))
    return text


async def main(ctx: AgentContext, *, api: MultusApi | None = None) -> None:
    resync = float(ctx.env.get("MULTUS_RESYNC_SECONDS") or 10)
    conf_dir = ctx.host_path(CNI_CONF_DIR)
    service = build_service(ctx, api=api)
    server = await start_server(service, socket_path=ctx.host_path(SOCKET))
    written: bytes | None = None
    try:
        if install.install_shim(ctx.host_path(CNI_BIN_DIR)):
            log.info("multus: shim installed as %s/%s", CNI_BIN_DIR, shim.TYPE)
        while True:
            written = sync_conf(ctx, conf_dir=conf_dir) or written
            ctx.set_ready(written is not None)
            if await ctx.sleep(resync):
                break
    finally:
        if install.remove_conf(conf_dir, written=written):
            log.info("multus: %s removed", install.CONF_NAME)
        ctx.set_ready(False)
        server.close()
        await server.wait_closed()
        ctx.host_path(SOCKET).unlink(missing_ok=True)
