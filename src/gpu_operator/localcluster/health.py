"""HTTP probes of the control plane: etcd ``/health``, the API server's ``/readyz``, the controller-manager's
and scheduler's ``/healthz``, and a few admin GETs used while waiting for the cluster to settle.

Every probe returns a bool and never raises on connection errors: it is called in a polling loop while the
process may still be binding its port.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx

from gpu_operator.localcluster.layout import Layout
from gpu_operator.names.objects import is_ready

PROBE_TIMEOUT = 2.0


def tls_context(*, layout: Layout, client_cert: bool = True) -> ssl.SSLContext:
    """A context trusting the cluster CA and, unless ``client_cert=False``, presenting the admin cert."""
    context = ssl.create_default_context(cafile=str(layout.ca_cert))
    if client_cert:
        context.load_cert_chain(certfile=str(layout.admin_cert), keyfile=str(layout.admin_key))
    return context


def admin_http_client(*, layout: Layout, server: str, timeout: float = 10.0) -> httpx.Client:
    """An ``httpx.Client`` authenticated as the cluster admin, with ``base_url`` set to the API server."""
    return httpx.Client(base_url=server, verify=tls_context(layout=layout), timeout=timeout, trust_env=False)


def etcd_healthy(*, url: str) -> bool:
    """etcd answers ``{"health": "true"}`` on ``url``."""
    try:
        response = httpx.get(url, timeout=PROBE_TIMEOUT, trust_env=False)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    try:
        return bool(json.loads(response.text).get("health") == "true")
    except (ValueError, AttributeError):
        return False


def endpoint_ok(*, client: httpx.Client, url: str) -> bool:
    """``url`` answers 200 with body ``ok`` (the format of ``/readyz``, ``/healthz`` and ``/livez``)."""
    try:
        response = client.get(url, timeout=PROBE_TIMEOUT)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.text.strip() == "ok"


def object_exists(*, client: httpx.Client, path: str) -> bool:
    """A GET of the API path ``path`` answers 200."""
    try:
        response = client.get(path, timeout=PROBE_TIMEOUT)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def read_token(path: Path) -> str:
    """The bearer token stored in ``path``."""
    return path.read_text(encoding="utf-8").strip()


def node_is_ready(name: str, *, client: httpx.Client) -> bool:
    """Node ``name`` exists and its ``Ready`` condition is ``True``."""
    try:
        response = client.get(f"/api/v1/nodes/{name}", timeout=PROBE_TIMEOUT)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    return is_ready(response.json())


#: What :func:`fetch_text` raises when the endpoint is not reachable (yet).
FETCH_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, OSError)


def fetch_text(url: str, *, timeout: float = 5.0) -> str:
    """The body of a plain-HTTP GET (a pod's /metrics on a local node); raises one of FETCH_ERRORS."""
    response = httpx.get(url, timeout=timeout, trust_env=False)
    response.raise_for_status()
    return response.text
