"""The operator's HTTP/1.1 transport (``kube.transport``) against a scripted server held in memory.

Each connection the transport opens gets the next script: the responses it answers, one per request
written, in order (``EOF`` closes it instead; a tuple sends its parts at once). Assertions read what
was sent and what httpx returned.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient, KubeConfig

from gpu_operator.kube.connect import async_client
from gpu_operator.kube.transport import StreamTransport

EOF = b""


class _Writer:
    def __init__(self, reader: asyncio.StreamReader, script: list[Any]) -> None:
        self.reader = reader
        self.script = script
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(data)
        answer = self.script.pop(0) if self.script else EOF
        for part in answer if isinstance(answer, tuple) else (answer,):  # a tuple: parts sent at once
            if part == EOF:
                self.reader.feed_eof()
            else:
                self.reader.feed_data(part)

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class _Server:
    def __init__(self, *scripts: list[Any]) -> None:
        self.scripts = list(scripts)
        self.writers: list[_Writer] = []

    async def open(self, host: str, port: int, tls: ssl.SSLContext | None) -> tuple[Any, Any]:
        if not self.scripts:
            raise ConnectionRefusedError(f"{host}:{port} refused")
        reader = asyncio.StreamReader()
        writer = _Writer(reader, self.scripts.pop(0))
        self.writers.append(writer)
        return reader, writer


def _ok(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(extra) + b"\r\n" + body


def _chunked(*pieces: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for piece in pieces:
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def _run(server: _Server, body: Any) -> Any:
    async def main() -> Any:
        transport = StreamTransport(ssl_context=None, opener=server.open)
        async with httpx.AsyncClient(transport=transport, base_url="http://api:6443") as client:
            return await body(client, transport)

    return asyncio.run(main())


def test_keep_alive_reuses_one_connection_and_sends_the_request_as_given() -> None:
    server = _Server([_ok(b'{"a":1}'), _ok(b'{"b":2}')])

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        first = await client.get("/api/v1/nodes", params={"labelSelector": "x=y"})
        second = await client.patch("/api/v1/nodes/n1", content=b'{"c":3}', headers={"Content-Type": "x/y"})
        return first.json(), second.json(), transport.opened

    assert _run(server, body) == ({"a": 1}, {"b": 2}, 1)
    get, patch = server.writers[0].sent
    assert get.startswith(b"GET /api/v1/nodes?labelSelector=x%3Dy HTTP/1.1\r\n")
    assert b"\r\nHost: api:6443\r\n" in get
    assert get.endswith(b"\r\n\r\n")
    assert patch.startswith(b"PATCH /api/v1/nodes/n1 HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 7\r\n" in patch
    assert patch.endswith(b'\r\n\r\n{"c":3}')


def test_a_chunked_stream_arrives_chunk_by_chunk_as_lines() -> None:
    events = [b'{"type":"ADDED","object":{"n":1}}\n', b'{"type":"MODIFIED",', b'"object":{"n":2}}\n']
    server = _Server([_chunked(*events), _ok(b"{}")])

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        async with client.stream("GET", "/api/v1/pods?watch=true") as response:
            lines = [line async for line in response.aiter_lines()]
        after = await client.get("/healthz")  # the fully read stream left its connection reusable
        return lines, after.status_code, transport.opened

    lines, status, opened = _run(server, body)
    assert lines == ['{"type":"ADDED","object":{"n":1}}', '{"type":"MODIFIED","object":{"n":2}}']
    assert (status, opened) == (200, 1)


def test_a_stream_closed_early_closes_its_connection() -> None:
    server = _Server([_chunked(b"one\n", b"two\n")[:-5]], [_ok(b"{}")])  # the first never ends

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        async with client.stream("GET", "/watch") as response:
            async for _ in response.aiter_lines():
                break
        await client.get("/next")
        return transport.opened

    assert _run(server, body) == 2
    assert server.writers[0].closed


def test_a_reused_connection_the_server_closed_is_retried_once_on_a_new_one() -> None:
    server = _Server([_ok(b"{}"), EOF], [_ok(b'{"again":true}')])

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        await client.get("/one")
        second = await client.get("/two")
        return second.json(), transport.opened

    assert _run(server, body) == ({"again": True}, 2)
    assert server.writers[1].sent[0].startswith(b"GET /two ")


def test_connection_close_is_honoured() -> None:
    server = _Server([_ok(b"{}", b"Connection: close\r\n")], [_ok(b"{}")])

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        await client.get("/one")
        await client.get("/two")
        return transport.opened

    assert _run(server, body) == 2
    assert server.writers[0].closed


def test_errors_are_httpx_transport_errors() -> None:
    async def refused(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        await client.get("/x")

    with pytest.raises(httpx.ConnectError, match="refused"):
        _run(_Server(), refused)
    truncated = _Server([(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", EOF)])
    with pytest.raises(httpx.ReadError):
        _run(truncated, refused)
    with pytest.raises(httpx.RemoteProtocolError, match="status line"):
        _run(_Server([b"SSH-2.0-OpenSSH\r\n"]), refused)


def test_no_body_for_204_and_an_interim_100_is_skipped() -> None:
    server = _Server([b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b'{"x":1}')])

    async def body(client: httpx.AsyncClient, transport: StreamTransport) -> Any:
        deleted = await client.delete("/x")
        created = await client.post("/y", content=b"{}")
        return deleted.status_code, deleted.content, created.json(), transport.opened

    assert _run(server, body) == (204, b"", {"x": 1}, 1)


_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


def _transport(client: AsyncClient) -> Any:
    return client._client._client._transport


@pytest.mark.parametrize("proxy", [None, "http://proxy.invalid:3128"])
def test_the_operator_client_uses_it_unless_a_proxy_is_configured(
    proxy: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy)
    client = async_client(config=KubeConfig.from_dict(_KUBECONFIG))
    assert isinstance(_transport(client), StreamTransport) is (proxy is None)
