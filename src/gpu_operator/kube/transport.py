"""HTTP/1.1 to the API server over asyncio streams: the operator's httpx transport.

Why not httpx's own (httpcore over anyio and h11): profiled from policy to rolled out, a third of the
operator's CPU went into that stack, reading watch events chunk by chunk (a cancel scope, a TLS
memory-BIO round and an h11 event per chunk) and opening TLS connections again whenever a burst of
requests outgrew the keep-alive pool. The API server speaks a small, well-formed part of HTTP/1.1
(Content-Length or chunked bodies, keep-alive), so a plain stream reader does the same work in a
fraction of the time. lightkube and httpx stay in charge of everything above the wire (URLs, auth,
retries on 401, JSON); only the bytes move here.

Connections are kept per origin and reused (idle ones up to ``max_idle``); a watch holds its own for
as long as it streams. A connection goes back to the pool only once its response was read to the end;
a response closed early (a cancelled watch) closes its connection instead. A request sent on a reused
connection that the server had already closed is retried once on a fresh one, as httpcore does.
Errors surface as httpx's transport exceptions, which lightkube and the informers already handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2 as httpx

MAX_IDLE = 32  # idle connections kept per origin: more than a pass's burst of parallel writes
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def proxy_configured() -> bool:
    """Whether the environment names a proxy (then httpx's own transport, which honours it, is used)."""
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


Opener = Callable[[str, int, "ssl.SSLContext | None"], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def open_stream(
    host: str, port: int, tls: ssl.SSLContext | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP (TLS when ``tls``) connection; the reader's buffer holds a large watch event whole."""
    return await asyncio.open_connection(host, port, ssl=tls, limit=2**20)


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class StreamTransport(httpx.AsyncBaseTransport):
    """An httpx transport speaking HTTP/1.1 over ``asyncio.open_connection`` (TLS when https)."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext | None, max_idle: int = MAX_IDLE, opener: Opener = open_stream
    ) -> None:
        self._ssl = ssl_context
        self._open = opener
        self._max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self.opened = 0  # connections opened (TLS handshakes when https), for tests and metrics

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
        origin = (request.url.scheme, request.url.host, request.url.port or _default_port(request.url.scheme))
        body = await request.aread()
        for attempt in (0, 1):
            conn = await self._connection(origin, request, timeouts.get("connect"))
            try:
                await self._send(conn, request, body)
                status, headers = await _timed(_read_head(conn.reader), timeouts.get("read"))
            except (ConnectionError, asyncio.IncompleteReadError, _ClosedError) as error:
                conn.close()
                if conn.reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: once more, on a new one
                raise httpx.RemoteProtocolError(f"connection lost: {error!r}", request=request) from error
            except TimeoutError as error:
                conn.close()
                raise httpx.ReadTimeout("timed out reading the response", request=request) from error
            except BaseException:
                conn.close()
                raise
            stream = _Body(
                transport=self, origin=origin, conn=conn, headers=headers, request=request,
                empty=request.method == "HEAD" or status in (204, 304), read_timeout=timeouts.get("read"),
            )  # fmt: skip
            return httpx.Response(status, headers=headers, stream=stream, extensions={"http_version": b"HTTP/1.1"})
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    async def _connection(
        self, origin: tuple[str, str, int], request: httpx.Request, timeout: float | None
    ) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                conn.reused = True
                return conn
            conn.close()
        scheme, host, port = origin
        tls = self._ssl if scheme == "https" else None
        try:
            reader, writer = await _timed(self._open(host, port, tls), timeout)
        except TimeoutError as error:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from error
        except (OSError, ssl.SSLError) as error:
            raise httpx.ConnectError(f"connecting to {host}:{port}: {error}", request=request) from error
        self.opened += 1
        return _Connection(reader, writer)

    def release(self, origin: tuple[str, str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) < self._max_idle and not conn.writer.is_closing():
            idle.append(conn)
        else:
            conn.close()

    @staticmethod
    async def _send(conn: _Connection, request: httpx.Request, body: bytes) -> None:
        head = [request.method.encode(), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += (name, b": ", value, b"\r\n")
        if body and "content-length" not in request.headers:
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        conn.writer.write(b"".join(head) + body)
        await conn.writer.drain()


class _ClosedError(Exception):
    """The server closed the connection before a response began."""


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


async def _timed(awaitable: Any, seconds: float | None) -> Any:
    if seconds is None:
        return await awaitable
    async with asyncio.timeout(seconds):
        return await awaitable


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, list[tuple[bytes, bytes]]]:
    while True:
        line = await reader.readline()
        if not line:
            raise _ClosedError("no status line")
        parts = line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {line[:80]!r}")
        status = int(parts[1])
        headers: list[tuple[bytes, bytes]] = []
        while True:
            field = await reader.readline()
            if field in (b"\r\n", b"\n", b""):
                break
            name, _, value = field.partition(b":")
            headers.append((name.strip(), value.strip()))
        if status >= 200 or status == 101:
            return status, headers
        # 1xx (100 Continue): the real status follows.


class _Body(httpx.AsyncByteStream):
    """A response body read off its connection: Content-Length, chunked, or until the server closes."""

    def __init__(
        self, *, transport: StreamTransport, origin: tuple[str, str, int], conn: _Connection,
        headers: list[tuple[bytes, bytes]], request: httpx.Request, empty: bool, read_timeout: float | None,
    ) -> None:  # fmt: skip
        self._transport = transport
        self._origin = origin
        self._conn: _Connection | None = conn
        self._request = request
        self._timeout = read_timeout
        fields = {name.lower(): value for name, value in headers}
        self._chunked = b"chunked" in fields.get(b"transfer-encoding", b"").lower()
        length = fields.get(b"content-length")
        self._length = 0 if empty else (int(length) if length is not None else None)
        self._keep = fields.get(b"connection", b"").lower() != b"close" and (self._chunked or self._length is not None)
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        try:
            if self._chunked:
                async for piece in self._chunks(conn.reader):
                    yield piece
            elif self._length is not None:
                if self._length:
                    yield await _timed(conn.reader.readexactly(self._length), self._timeout)
            else:
                while piece := await _timed(conn.reader.read(65536), self._timeout):
                    yield piece
            self._done = True
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            raise httpx.ReadError(
                f"connection lost while reading the body: {error!r}", request=self._request
            ) from error
        except TimeoutError as error:
            raise httpx.ReadTimeout("timed out reading the body", request=self._request) from error

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            size_line = await _timed(reader.readline(), self._timeout)
            if not size_line:
                raise asyncio.IncompleteReadError(b"", None)
            size = int(size_line.split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers: none that matter
                return
            data = await _timed(reader.readexactly(size + 2), self._timeout)
            yield data[:-2]

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep:
            self._transport.release(self._origin, conn)
        else:
            conn.close()
