"""TLS and basic auth for the metrics endpoint, configured like Prometheus exporters (exporter-toolkit).

The web config file is YAML::

    tls_server_config:
      cert_file: server.crt        # relative paths are relative to the config file
      key_file: server.key
      client_ca_file: ca.crt       # optional; with client_auth_type RequireAndVerifyClientCert
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12           # TLS10..TLS13
    basic_auth_users:
      prometheus: $2b$12$...       # bcrypt hash of the password

``http_server_config`` (HTTP/2, extra headers) is accepted and ignored. Unknown keys are errors (a
misspelt ``tls_server_config`` must not silently serve plain HTTP).
Passwords are checked with ``bcrypt`` (imported only when users are configured) in a worker thread,
and a successful check is remembered by a digest of the credentials, as exporter-toolkit caches
them: bcrypt costs tens to hundreds of milliseconds by design, far too much for every scrape.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.api.yamltext import YamlError, load_one

_TOP = frozenset({"tls_server_config", "basic_auth_users", "http_server_config"})
_TLS = frozenset({"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"})
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# A bcrypt hash of a random string: checked for unknown users so timing does not reveal which exist.
_DUMMY_HASH = b"$2b$10$qyNqjElK61ahJ81PY4nvG.bhGY5tHywiRCKp95bzrSj3f5EUL6Hsm"
_CACHE_SIZE = 64


class WebConfigError(ConfigRefusedError):
    """The web config file is invalid; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str | None = None

    def context(self) -> ssl.SSLContext:
        """A server-side SSLContext (raises WebConfigError when a file cannot be loaded)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = _VERSIONS[self.min_version]
        if self.max_version:
            ctx.maximum_version = _VERSIONS[self.max_version]
        try:
            ctx.load_cert_chain(certfile=self.cert_file, keyfile=self.key_file)
            if self.client_ca_file is not None:
                ctx.load_verify_locations(cafile=self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"TLS: cannot load {self.cert_file} / {self.key_file}: {exc}") from exc
        ctx.verify_mode = _CLIENT_AUTH[self.client_auth_type]
        return ctx


@dataclass(kw_only=True)
class BasicAuth:
    """Users and their bcrypt hashes; :meth:`check` an ``Authorization`` header value."""

    users: Mapping[str, bytes]
    _ok: dict[bytes, None] = field(default_factory=dict)  # digests of good credentials, oldest first

    async def check(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        digest = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if digest in self._ok:
            return True
        hashed = self.users.get(user)
        ok = await asyncio.to_thread(_bcrypt_check, password.encode(), hashed or _DUMMY_HASH)
        if ok and hashed is not None:
            self._ok[digest] = None
            while len(self._ok) > _CACHE_SIZE:
                del self._ok[next(iter(self._ok))]
            return True
        return False


def _bcrypt_check(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # noqa: PLC0415 - only exporters with basic auth need it

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # not a bcrypt hash
        return False


@dataclass(frozen=True, kw_only=True)
class WebConfig:
    tls: TlsConfig | None = None
    auth: BasicAuth | None = None


def _mapping(value: Any, *, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _tls(raw: dict[str, Any], *, where: str, resolve: Callable[[str], Path]) -> TlsConfig | None:
    if not raw:
        return None
    unknown = sorted(set(raw) - _TLS)
    if unknown:
        raise WebConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_TLS))})")
    for key in ("cert_file", "key_file"):
        if not raw.get(key):
            raise WebConfigError(f"{where}.{key}: required when TLS is configured")
    auth = str(raw.get("client_auth_type") or "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: {auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    for key in ("min_version", "max_version"):
        if raw.get(key) and raw[key] not in _VERSIONS:
            raise WebConfigError(f"{where}.{key}: {raw[key]!r} is not one of {', '.join(_VERSIONS)}")
    if auth == "RequireAndVerifyClientCert" and not raw.get("client_ca_file"):
        raise WebConfigError(f"{where}.client_ca_file: required with client_auth_type {auth}")
    return TlsConfig(
        cert_file=resolve(str(raw["cert_file"])),
        key_file=resolve(str(raw["key_file"])),
        client_ca_file=resolve(str(raw["client_ca_file"])) if raw.get("client_ca_file") else None,
        client_auth_type=auth,
        min_version=str(raw.get("min_version") or "TLS12"),
        max_version=str(raw["max_version"]) if raw.get("max_version") else None,
    )


def load_web_config(path: Path, *, container_path: Callable[[str], Path] = Path) -> WebConfig:
    """Read and check a web config file (raises WebConfigError).

    Relative file names are relative to the config file; absolute ones are paths in the container,
    mapped with ``container_path`` (``ctx.path`` in an agent).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read the web config: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise WebConfigError(f"{path}: the web config is not UTF-8 text (byte {exc.start})") from exc
    try:
        raw = load_one(text, source=str(path))
    except YamlError as exc:
        # The shared loader names the file and line, and refuses duplicate keys and aliases.
        raise WebConfigError(str(exc)) from exc
    try:
        return _web_config(raw, path=path, container_path=container_path)
    except WebConfigError as exc:
        # Field errors name the field; the file is named once, here, for every one of them.
        raise WebConfigError(f"{path}: {exc}") from exc


def _web_config(raw: Any, *, path: Path, container_path: Callable[[str], Path]) -> WebConfig:
    top = _mapping(raw, where="the web config")
    unknown = sorted(set(top) - _TOP)
    if unknown:
        raise WebConfigError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_TOP))})")

    def resolve(name: str) -> Path:
        return container_path(name) if name.startswith("/") else path.parent / name

    where = "tls_server_config"
    tls = _tls(_mapping(top.get(where), where=where), where=where, resolve=resolve)
    users = _mapping(top.get("basic_auth_users"), where="basic_auth_users")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            raise WebConfigError(f"basic_auth_users.{user}: expected a bcrypt hash ($2a$/$2b$/$2y$...)")
    auth = BasicAuth(users={str(u): h.encode() for u, h in users.items()}) if users else None
    return WebConfig(tls=tls, auth=auth)
