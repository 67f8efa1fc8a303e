"""A small asyncio HTTP/1.1 server for metrics endpoints (the exporter's and the node status exporter's):
GET/HEAD of pre-rendered pages, and :func:`parse_listen` for their listen addresses.

Why not a framework: the exporter serves three fixed paths whose bodies are rendered once per
collection interval, so a scrape is a dictionary lookup and one write. aiohttp is not a dependency
and would add ~15 MiB to a process meant to stay far below dcgm-exporter's 400-500 MiB;
``http.server`` is thread-per-request and has no keep-alive worth the name. This module speaks
just enough HTTP/1.1 for Prometheus and kubelet probes: persistent connections, ``Content-Length``
bodies, gzip when the client accepts it (compressed once per page, not per scrape), optional TLS
(an ``ssl.SSLContext``) and basic auth (an :class:`Authenticator`, e.g. the exporter's
``webconfig.BasicAuth``) on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Protocol

from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe

log = logging.getLogger(__name__)
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_LINE = 8192
_MAX_HEADERS = 100
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Page:
    """A response body with its type; the gzip form is computed on first demand and kept."""

    __slots__ = ("_gzipped", "body", "content_type", "headers", "status")

    def __init__(
        self,
        body: bytes,
        *,
        content_type: str = "text/plain; charset=utf-8",
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.body = body
        self.content_type = content_type
        self.status = status
        self.headers = dict(headers or {})
        self._gzipped: bytes | None = None

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            # Level 1: most of the size win at a fraction of the CPU of the default level.
            self._gzipped = gzip.compress(self.body, compresslevel=1, mtime=0)
        return self._gzipped


class Authenticator(Protocol):
    async def check(self, header: str | None) -> bool: ...


Routes = Mapping[str, Callable[[], Page]]


def parse_listen(text: str, *, variable: str = "DCGM_EXPORTER_LISTEN") -> tuple[str, int]:
    """``host:port`` / ``:port`` / ``[v6]:port`` -> (host, port); an empty host listens everywhere."""
    host, sep, port = text.strip().rpartition(":")
    # At most 5 ASCII digits: int() of thousands of digits fails with a message that names nothing.
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise ConfigRefusedError(
            f"{variable}: not an address: {describe(text)} (expected e.g. :9400 or 127.0.0.1:9400)"
        )
    return host.strip("[]"), int(port)


class HttpServer:
    """Serves ``routes`` (path -> page provider) on ``host:port`` until :meth:`close`."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        routes: Routes,
        ssl_context: ssl.SSLContext | None = None,
        auth: Authenticator | None = None,
        idle_timeout: float = 300.0,
        name: str = "http",
    ) -> None:
        self.host = host
        self.requested_port = port
        self.routes = routes
        self.ssl_context = ssl_context
        self.auth = auth
        self.idle_timeout = idle_timeout
        self.name = name
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            host=self.host or None,
            port=self.requested_port,
            ssl=self.ssl_context,
            limit=_MAX_LINE,
            reuse_address=True,
        )

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"{self.name}: server not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._connections):  # idle keep-alive connections would hold the handlers
            writer.close()
        # Closing a connection ends its handler with end-of-stream; wait for that rather than letting
        # the loop cancel them later (Python 3.11's stream callback chokes on a cancelled handler).
        handlers = [task for task in self._handlers if not task.done()]
        if handlers:
            await asyncio.wait(handlers, timeout=2.0)
        with contextlib.suppress(Exception):
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        self._connections.add(writer)
        try:
            while True:
                try:
                    request = await asyncio.wait_for(_read_request(reader), timeout=self.idle_timeout)
                except (TimeoutError, ValueError, ConnectionError, asyncio.IncompleteReadError, OSError):
                    return  # idle, malformed or gone: drop the connection
                if request is None:
                    return
                if not await self._respond(request, writer):
                    return
        except Exception:  # a broken client must never take the server down
            log.debug("%s: connection failed", self.name, exc_info=True)
        except asyncio.CancelledError:
            # Nobody awaits a connection handler: asyncio's stream callback would report the
            # cancellation (loop shutdown) as an error on 3.11, so it ends here quietly.
            pass
        finally:
            self._connections.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        self.requests += 1
        keep_alive = request.keep_alive
        page = await self._page(request)
        body = page.body
        headers = {"Content-Type": page.content_type, **page.headers}
        if body and "gzip" in request.headers.get("accept-encoding", "") and page.status == 200:
            body = page.gzipped()
            headers["Content-Encoding"] = "gzip"
        headers["Content-Length"] = str(len(body))
        headers["Connection"] = "keep-alive" if keep_alive else "close"
        head = f"HTTP/1.1 {page.status} {_REASONS.get(page.status, 'Unknown')}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (b"" if request.method == "HEAD" else body))
        await writer.drain()
        return keep_alive

    async def _page(self, request: _Request) -> Page:
        if self.auth is not None and not await self.auth.check(request.headers.get("authorization")):
            return Page(b"Unauthorized\n", status=401, headers={"WWW-Authenticate": 'Basic realm="metrics"'})
        if request.method not in ("GET", "HEAD"):
            return Page(b"Method Not Allowed\n", status=405, headers={"Allow": "GET, HEAD"})
        provider = self.routes.get(request.path)
        if provider is None:
            return Page(b"Not Found\n", status=404)
        try:
            return provider()
        except Exception:
            log.exception("%s: rendering %s failed", self.name, request.path)
            return Page(b"Internal Server Error\n", status=500)


class _Request:
    __slots__ = ("headers", "keep_alive", "method", "path")

    def __init__(self, *, method: str, path: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One request head (None at a clean end of stream); ValueError when malformed or too large."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").strip().split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"bad request line {line[:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"bad header line {raw[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    else:
        raise ValueError("too many headers")
    length = int(headers.get("content-length", "0") or "0")
    if length < 0 or length > 65536:
        raise ValueError("request body too large")
    if length:
        await reader.readexactly(length)  # metrics endpoints take no body: read it to keep the stream in step
    return _Request(method=method, path=target.split("?", 1)[0], version=version, headers=headers)
