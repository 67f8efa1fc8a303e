"""How every process reaches the API server: lightkube clients from a kubeconfig, the environment or
a pod's service account. The one place where clients are made, so field managers and credentials are
handled the same way by the operator, its CLI, the agents and the simulated operator pod.
"""

from __future__ import annotations

from pathlib import Path

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, User

from gpu_operator.kube.transport import StreamTransport, proxy_configured

FIELD_MANAGER = "gpu-operator"


def _config(kubeconfig: str | Path | None) -> KubeConfig | None:
    return KubeConfig.from_file(str(kubeconfig)) if kubeconfig else None


def async_client(
    *, kubeconfig: str | Path | None = None, config: KubeConfig | None = None, field_manager: str | None = FIELD_MANAGER
) -> AsyncClient:
    """An async client: ``config``, else the kubeconfig file, else in-cluster or ``$KUBECONFIG``. It
    speaks through :class:`~gpu_operator.kube.transport.StreamTransport` (with the same TLS settings
    lightkube would use) unless a proxy is configured, which only httpx's own transport honours."""
    chosen = (config or _config(kubeconfig) or KubeConfig.from_env()).get()
    if chosen is None:
        raise ValueError("the kubeconfig has no current context")
    if proxy_configured():
        return AsyncClient(config=chosen, field_manager=field_manager)
    return AsyncClient(config=chosen, field_manager=field_manager, transport=stream_transport(chosen))


def stream_transport(config: SingleConfig) -> StreamTransport:
    """The operator's transport for ``config``: TLS verified (and a client certificate presented) exactly
    as lightkube's own client would."""
    secure = config.cluster.server.startswith("https:")
    if config.user is None:
        raise ValueError(f"context {config.context_name!r} names no user")
    context = verify_cluster(config.cluster, config.user, config.abs_file) if secure else None
    return StreamTransport(ssl_context=context)


def sync_client(
    *, kubeconfig: str | Path | None = None, config: KubeConfig | None = None, field_manager: str | None = None
) -> Client:
    """A blocking client (CLI, the demo, hook Jobs): ``config``, else the kubeconfig file, else in-cluster
    or ``$KUBECONFIG``."""
    chosen = config or _config(kubeconfig)
    if chosen is None:
        return Client(field_manager=field_manager)
    return Client(config=chosen, field_manager=field_manager)


def service_account_config(*, server: str, ca_file: Path, token_file: Path, namespace: str) -> KubeConfig:
    """A pod's in-cluster credentials. ``token_file``, not the token: lightkube re-reads it after a 401,
    as client-go does when the kubelet rotates it."""
    return KubeConfig.from_one(
        cluster=Cluster(server=server, certificate_auth=str(ca_file)),
        user=User(token_file=str(token_file)),
        namespace=namespace,
    )
