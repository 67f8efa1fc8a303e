"""Rendering kubeconfig files for the local control plane.

Pure functions: they build the ``kind: Config`` document as a dict (and YAML text) with the CA, client
certificate and key embedded as base64 data, so the file stays usable when copied elsewhere. One context,
named after the cluster, is current.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class KubeconfigUser:
    """Credentials for one kubeconfig user: a client certificate and key, or a bearer token."""

    name: str
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None

    def as_entry(self) -> dict[str, Any]:
        """The ``users[].user`` mapping."""
        user: dict[str, Any] = {}
        if self.client_cert_pem is not None and self.client_key_pem is not None:
            user["client-certificate-data"] = _b64(self.client_cert_pem)
            user["client-key-data"] = _b64(self.client_key_pem)
        if self.token is not None:
            user["token"] = self.token
        if not user:
            raise ValueError(f"kubeconfig user {self.name!r} has neither a client certificate nor a token")
        return user


def kubeconfig_dict(
    *, cluster_name: str, server: str, ca_pem: bytes, user: KubeconfigUser, namespace: str | None = None
) -> dict[str, Any]:
    """The kubeconfig document for one cluster, one user and one (current) context."""
    context: dict[str, Any] = {"cluster": cluster_name, "user": user.name}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user.name, "user": user.as_entry()}],
        "contexts": [{"name": cluster_name, "context": context}],
        "current-context": cluster_name,
    }


def render_kubeconfig(
    *, cluster_name: str, server: str, ca_pem: bytes, user: KubeconfigUser, namespace: str | None = None
) -> str:
    """The kubeconfig document as YAML text."""
    document = kubeconfig_dict(cluster_name=cluster_name, server=server, ca_pem=ca_pem, user=user, namespace=namespace)
    return yaml.safe_dump(document, sort_keys=False)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
