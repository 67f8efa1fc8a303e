"""A small async Kubernetes REST client: JSON dicts over one pooled ``httpx.AsyncClient``.

The kube layer's second client, beside lightkube's (``kube.api``): the simulator and its node agents
use it. Why plain dicts rather than lightkube models: at a thousand nodes the simulator renews ~100
leases a second and reads every bound pod from a watch; it never needs the typed objects, and skipping
model construction (and, for writes, even the response body) keeps its own CPU low. Credentials come
from a kubeconfig file (client certificate, token or CA given inline or as files).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import ssl
import sys
import tempfile
from base64 import b64decode
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

JSON = dict[str, Any]

# httpcore asks for sniffio on every request; when it is not installed each failed import walks sys.path
# again (~0.15 ms, a sixth of the simulator's CPU at scale). Recording the absence once makes the lookup
# free and changes nothing else: importing it still raises ModuleNotFoundError.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",  # server-side apply (JSON is YAML)
}


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, *, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


def _data(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return b64decode(str(entry[f"{key}-data"]))
    if entry.get(key):
        path = Path(str(entry[key]))
        return (path if path.is_absolute() else base / path).read_bytes()
    return None


@dataclass(frozen=True, kw_only=True)
class ClusterAccess:
    """Where the API server is and how to authenticate (from one kubeconfig context)."""

    server: str
    ca_pem: bytes | None = None
    insecure: bool = False
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> ClusterAccess:
        # The shared loader (duplicate keys, aliases refused; one-line errors), imported here: the API package
        # it lives in is heavy, and only the clients built from a kubeconfig need it.
        from gpu_operator.api.yamltext import load_one  # noqa: PLC0415

        document = load_one(path.read_text(encoding="utf-8"), source=str(path))
        if not isinstance(document, dict):
            raise ValueError(f"{path}: a kubeconfig is a mapping")
        name = context or document.get("current-context")
        contexts = {c["name"]: c["context"] for c in document.get("contexts", [])}
        if name not in contexts:
            raise ValueError(f"{path}: context {name!r} not found")
        chosen = contexts[name]
        cluster = {c["name"]: c["cluster"] for c in document.get("clusters", [])}[chosen["cluster"]]
        user = {u["name"]: u.get("user", {}) for u in document.get("users", [])}.get(chosen.get("user"), {})
        base = path.parent
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = (base / str(user["tokenFile"])).read_text(encoding="utf-8").strip()
        return cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_pem=_data(cluster, "certificate-authority", base),
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            client_cert_pem=_data(user, "client-certificate", base),
            client_key_pem=_data(user, "client-key", base),
            token=token,
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca_pem.decode() if self.ca_pem else None)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_pem and self.client_key_pem:
            # ssl only loads key pairs from files: write them to a private directory that is removed at once.
            with tempfile.TemporaryDirectory(prefix="sim-cred-") as directory:
                cert, key = Path(directory) / "c.pem", Path(directory) / "k.pem"
                cert.write_bytes(self.client_cert_pem)
                key.touch(mode=0o600)
                key.write_bytes(self.client_key_pem)
                context.load_cert_chain(certfile=str(cert), keyfile=str(key))
        return context


class ApiClient:
    """JSON requests to one API server; every method raises :class:`ApiError` on an error status.

    At most ``max_connections`` requests are in flight; the rest wait on a semaphore, not in httpcore's
    pool: the pool rescans its whole queue each time a request starts or ends, and with the ~6,000
    requests 1,000 starting nodes queue there, that scan alone took the simulator's whole core.
    """

    def __init__(
        self,
        *,
        access: ClusterAccess,
        max_connections: int = 32,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.access = access
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        headers = {"Authorization": f"Bearer {access.token}"} if access.token else {}
        self._http = httpx.AsyncClient(
            base_url=access.server,
            verify=access.ssl_context() if transport is None else True,
            headers={"Accept": "application/json", "User-Agent": "gpu-operator-sim", **headers},
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            trust_env=False,
            transport=transport,  # the unit tests' in-memory API (kube.fakeapi.FakeApi.rest_transport)
        )

    async def close(self) -> None:
        await self._http.aclose()

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            status = response.json()
        except ValueError:
            status = {}
        raise ApiError(
            code=response.status_code,
            reason=str(status.get("reason", response.reason_phrase)),
            message=str(status.get("message", response.text[:500])),
        )

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> JSON:
        async with self._slots:
            response = await self._http.get(path, params=params)
        self._check(response)
        result: JSON = response.json()
        return result

    async def post(self, path: str, body: JSON, *, want: bool = True) -> JSON:
        async with self._slots:
            response = await self._http.post(
                path, content=json.dumps(body), headers={"Content-Type": "application/json"}
            )
        self._check(response)
        return dict(response.json()) if want else {}

    async def patch(
        self, path: str, body: Any, *, kind: str = "merge", want: bool = False, params: Mapping[str, str] | None = None
    ) -> JSON:
        """PATCH; the response body is parsed only when ``want`` (writes in hot loops skip it)."""
        async with self._slots:
            response = await self._http.patch(
                path, content=json.dumps(body), headers={"Content-Type": PATCH_TYPES[kind]}, params=params
            )
        self._check(response)
        return dict(response.json()) if want else {}

    async def delete(self, path: str, *, grace_seconds: int | None = None, uid: str | None = None) -> bool:
        """DELETE (404 counts as done: then False); ``uid`` makes it apply only to that incarnation of the
        object."""
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        async with self._slots:
            response = await self._http.request(
                "DELETE", path, content=json.dumps(options), headers={"Content-Type": "application/json"}
            )
        if response.status_code in (404, 409):  # gone already, or a newer object with the same name
            return False
        self._check(response)
        return True

    async def watch(self, path: str, *, params: Mapping[str, str]) -> AsyncIterator[JSON]:
        """Events (``{"type": ..., "object": ...}``) of one watch request, until the server ends it."""
        query = {**params, "watch": "true", "allowWatchBookmarks": "true"}
        stream = self._http.stream("GET", path, params=query, timeout=httpx.Timeout(30.0, read=None))
        async with self._slots, stream as response:  # a watch keeps its connection, so it keeps its slot
            if response.status_code >= 400:
                await response.aread()
                self._check(response)
            async for line in response.aiter_lines():
                if line.strip():
                    event: JSON = json.loads(line)
                    yield event
