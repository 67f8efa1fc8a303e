"""A TLS proxy in front of the real API server that can end watches with 410 Gone, as the API server does.

The API server ends a watch with an ``ERROR`` event carrying a ``Status`` of code 410 (reason
``Expired``) when the client's resourceVersion has left its window; it cannot be made to do so on
demand, so the chaos tier puts this proxy between the operator and the API server: every request and
response passes through unchanged (HTTP/1.1, Content-Length or chunked bodies, parsed only to find
their ends) until ``expire()`` is called; then each open watch whose path contains the given text gets
that ``ERROR`` event as its next chunk, the end of its body, and a closed connection. The proxy speaks
TLS with the API server's own serving certificate and reaches the API server as the admin user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpu_operator.localcluster.cluster import LocalCluster

GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 1 (2)",
        "reason": "Expired",
        "code": 410,
    },
}


@dataclass
class _Watch:
    path: str
    gone: asyncio.Event = field(default_factory=asyncio.Event)


class WatchProxy:
    """Start with ``with WatchProxy(cluster) as proxy``; ``proxy.kubeconfig`` points a client at it."""

    def __init__(self, cluster: LocalCluster, *, directory: Path) -> None:
        layout = cluster.layout
        self._upstream_port = int(cluster.server.rsplit(":", 1)[1])
        self._server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_tls.load_cert_chain(layout.serving_cert, layout.serving_key)
        self._client_tls = ssl.create_default_context(cafile=str(layout.ca_cert))
        self._client_tls.load_cert_chain(layout.admin_cert, layout.admin_key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._watches: list[_Watch] = []
        self._streams: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.kubeconfig = directory / "proxy-kubeconfig.yaml"
        self._source_kubeconfig = cluster.kubeconfig_path

    def __enter__(self) -> WatchProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        config = yaml.safe_load(self._source_kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _shutdown(self) -> None:
        """Close the listener and every connection, and let each handler finish."""
        if self._server is not None:
            self._server.close()
        for stream in list(self._streams):
            stream.close()
        for stream in list(self._streams):
            with contextlib.suppress(Exception):
                await stream.wait_closed()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def open_watches(self, fragment: str = "") -> int:
        """How many watches whose path contains ``fragment`` are open now."""
        return sum(1 for w in list(self._watches) if fragment in w.path and not w.gone.is_set())

    def expire(self, fragment: str = "") -> int:
        """End every open watch whose path contains ``fragment`` with 410 Gone; return how many."""
        chosen = [w for w in list(self._watches) if fragment in w.path and not w.gone.is_set()]
        for watch in chosen:
            self._loop.call_soon_threadsafe(watch.gone.set)
        return len(chosen)

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_tls)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self._upstream_port, ssl=self._client_tls, server_hostname="127.0.0.1"
            )
        except OSError:
            writer.close()
            return
        self._streams.update((writer, up_writer))
        try:
            while True:
                head = await _head(reader)
                if head is None:
                    return
                path = head.split(b" ", 2)[1].decode()
                up_writer.write(head)
                await _copy_body(reader, up_writer, _fields(head))
                await up_writer.drain()
                watch = _Watch(path=path) if "watch=" in path and "watch=false" not in path else None
                if watch is not None:
                    self._watches.append(watch)
                try:
                    if not await self._answer(up_reader, writer, watch):
                        return
                finally:
                    if watch is not None:
                        self._watches.remove(watch)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            return
        finally:
            for w in (writer, up_writer):
                self._streams.discard(w)
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def _answer(self, up: asyncio.StreamReader, down: asyncio.StreamWriter, watch: _Watch | None) -> bool:
        """Forward one response; False when the connection must close after it."""
        head = await _head(up)
        if head is None:
            return False
        down.write(head)
        fields = _fields(head)
        if b"chunked" not in fields.get(b"transfer-encoding", b"").lower():
            await _copy_body(up, down, fields)
            await down.drain()
            return fields.get(b"connection", b"").lower() != b"close"
        while True:
            size_line = await self._next_chunk(up, watch)
            if size_line is None:  # the watch is to end with 410 Gone here, between two chunks
                event = json.dumps(GONE).encode() + b"\n"
                down.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                await down.drain()
                return False
            size = int(size_line.split(b";")[0], 16)
            down.write(size_line)
            if size == 0:
                down.write(await up.readuntil(b"\r\n"))  # no trailers from the API server
                await down.drain()
                return True
            down.write(await up.readexactly(size + 2))
            await down.drain()

    @staticmethod
    async def _next_chunk(up: asyncio.StreamReader, watch: _Watch | None) -> bytes | None:
        if watch is None:
            return await up.readuntil(b"\r\n")
        reading = asyncio.ensure_future(up.readuntil(b"\r\n"))
        gone = asyncio.ensure_future(watch.gone.wait())
        await asyncio.wait({reading, gone}, return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            gone.cancel()
            return reading.result()
        reading.cancel()
        return None


async def _head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None


def _fields(head: bytes) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


async def _copy_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fields: dict[bytes, bytes]) -> None:
    length = int(fields.get(b"content-length", b"0"))
    if length:
        writer.write(await reader.readexactly(length))
