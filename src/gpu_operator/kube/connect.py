"""How every process reaches the API server: lightkube clients from a kubeconfig, the environment or
a pod's service account. The one place where clients are made, so field managers and credentials are
handled the same way by the operator, its CLI, the agents and the simulated operator pod.
"""

from __future__ import annotations

from pathlib import Path

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.models import Cluster, User

FIELD_MANAGER = "gpu-operator"


def _config(kubeconfig: str | Path | None) -> KubeConfig | None:
    return KubeConfig.from_file(str(kubeconfig)) if kubeconfig else None


def async_client(
    *, kubeconfig: str | Path | None = None, config: KubeConfig | None = None, field_manager: str | None = FIELD_MANAGER
) -> AsyncClient:
    """An async client: ``config``, else the kubeconfig file, else in-cluster or ``$KUBECONFIG``."""
    chosen = config or _config(kubeconfig)
    if chosen is None:
        return AsyncClient(field_manager=field_manager)
    return AsyncClient(config=chosen, field_manager=field_manager)


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
