"""The metrics HTTP server: routes, keep-alive, gzip, malformed requests; TLS and basic auth from a web config."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import ipaddress
import ssl
from pathlib import Path

import bcrypt
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpu_operator.agents.exporter import webconfig
from gpu_operator.agents.exporter.webconfig import WebConfigError, load_web_config
from gpu_operator.agents.shared.httpserver import METRICS_CONTENT_TYPE, HttpServer, Page

BODY = b"# HELP x y\n# TYPE x gauge\nx 1\n" * 50


def server(**kw: object) -> HttpServer:
    page = Page(BODY, content_type=METRICS_CONTENT_TYPE)
    return HttpServer(host="127.0.0.1", port=0, routes={"/metrics": lambda: page}, **kw)  # type: ignore[arg-type]


async def raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read()  # until the server closes
    writer.close()
    await writer.wait_closed()
    return answer


def test_routes_methods_keep_alive_and_gzip() -> None:
    async def scenario() -> None:
        srv = server()
        await srv.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.port}") as client:
                got = await client.get("/metrics?x=1", headers={"Accept-Encoding": "identity"})
                assert (got.status_code, got.content, got.headers["content-type"]) == (200, BODY, METRICS_CONTENT_TYPE)
                zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
                assert zipped.headers["content-encoding"] == "gzip"
                assert zipped.content == BODY  # httpx decodes
                assert int(zipped.headers["content-length"]) < len(BODY)
                assert (await client.get("/nope")).status_code == 404
                posted = await client.post("/metrics", content=b"x")
                assert (posted.status_code, posted.headers["allow"]) == (405, "GET, HEAD")
                head = await client.head("/metrics", headers={"Accept-Encoding": "identity"})
                assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", str(len(BODY)))
            # Two requests on one connection, the second asking to close it.
            two = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"
            answer = await raw(srv.port, two)
            assert answer.count(b"HTTP/1.1 200 OK") == 2
            assert answer.endswith(BODY)
            assert await raw(srv.port, b"garbage\r\n\r\n") == b""  # malformed: dropped
            assert srv.requests == 7
        finally:
            await srv.close()

    asyncio.run(scenario())


def test_provider_failure_is_a_500() -> None:
    def broken() -> Page:
        raise RuntimeError("boom")

    async def scenario() -> None:
        srv = HttpServer(host="127.0.0.1", port=0, routes={"/metrics": broken})
        await srv.start()
        try:
            answer = await raw(srv.port, b"GET /metrics HTTP/1.0\r\n\r\n")  # 1.0: closes after one response
            assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
        finally:
            await srv.close()

    asyncio.run(scenario())


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def test_tls_and_basic_auth_from_a_web_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert_file, _ = self_signed(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = tmp_path / "web.yaml"
    config.write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_version: TLS12\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n",
        encoding="utf-8",
    )
    web = load_web_config(config)
    assert web.tls is not None
    assert web.auth is not None
    checks: list[bytes] = []
    real_check = webconfig._bcrypt_check

    def counting(password: bytes, hashed: bytes) -> bool:
        checks.append(password)
        return real_check(password, hashed)

    monkeypatch.setattr(webconfig, "_bcrypt_check", counting)
    trust = ssl.create_default_context(cafile=str(cert_file))

    async def scenario() -> None:
        srv = server(ssl_context=web.tls.context(), auth=web.auth)  # type: ignore[union-attr]
        await srv.start()
        try:
            url = f"https://127.0.0.1:{srv.port}/metrics"
            async with httpx.AsyncClient(verify=trust) as client:
                denied = await client.get(url)
                assert denied.status_code == 401
                assert denied.headers["www-authenticate"].startswith("Basic")
                assert (await client.get(url, auth=("prometheus", "wrong"))).status_code == 401
                assert (await client.get(url, auth=("nobody", "s3cret"))).status_code == 401
                for _ in range(3):
                    ok = await client.get(url, auth=("prometheus", "s3cret"))
                    assert (ok.status_code, ok.content) == (200, BODY)
                bad = await client.get(url, headers={"Authorization": "Basic !!!"})
                assert bad.status_code == 401
            assert checks == [b"wrong", b"s3cret", b"s3cret"]  # unknown user: dummy check; then cached
            async with httpx.AsyncClient() as plain:
                with pytest.raises(httpx.HTTPError):
                    await plain.get(f"http://127.0.0.1:{srv.port}/metrics")
        finally:
            await srv.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tls_server_confg: {}\n", "unknown key(s) tls_server_confg"),
        ("tls_server_config:\n  cert_file: a\n", "tls_server_config.key_file: required"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  ciphers: x\n", "unknown key(s) ciphers"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n", "client_auth_type"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n", "min_version"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
            "client_ca_file: required",
        ),
        ("basic_auth_users:\n  u: plaintext\n", "basic_auth_users.u: expected a bcrypt hash"),
        ("- a list\n", "expected a mapping"),
        ("a: [unclosed\n", "invalid YAML"),
    ],
)
def test_invalid_web_configs(tmp_path: Path, text: str, words: str) -> None:
    config = tmp_path / "web.yml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(WebConfigError, match=r".*") as caught:
        load_web_config(config)
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"{config}:"), "every error names the file"


def test_paths_and_unloadable_certificates(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: /certs/tls.crt\n  key_file: rel.key\n", encoding="utf-8")
    web = load_web_config(config, container_path=lambda p: tmp_path / "container" / p.lstrip("/"))
    assert web.tls is not None
    assert web.tls.cert_file == tmp_path / "container/certs/tls.crt"
    assert web.tls.key_file == tmp_path / "rel.key"
    with pytest.raises(WebConfigError, match="cannot load"):
        web.tls.context()
    assert load_web_config(_empty(tmp_path)).tls is None


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yml"
    path.write_text("", encoding="utf-8")
    return path


def test_gzip_is_computed_once_per_page() -> None:
    page = Page(BODY)
    first = page.gzipped()
    assert page.gzipped() is first
    assert gzip.decompress(first) == BODY
