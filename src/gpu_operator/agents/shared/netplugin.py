"""Serving the network device plugins (RDMA shared, SR-IOV): load sources, serve, register, keep it so.

:func:`serve_plugins` is the whole loop an agent runs; an agent only writes ``load()`` (read its config,
discover the NICs, return one :class:`PluginSource` per resource). Level-triggered, every tick
(``TICK_SECONDS``) until ``ctx.sleep`` says stop:

* ``load()`` runs (in a thread) at start, then every ``refresh_seconds`` (0 or less: only until it first
  succeeds). Until a first success it is retried every ``RETRY_SECONDS``. An exception, or two sources
  sharing a resource name or endpoint, is logged (once per distinct message) and the previous sources keep
  serving. An agent that passes its config's :class:`~gpu_operator.agents.shared.configinput.ReloadLog`
  gets the Events its loader queued there sent after each load.
* Sources are matched to servers by (resource name, endpoint): a new pair starts a server, a vanished one
  stops it, a kept one serves the new source object, and ListAndWatch streams get the new list when
  ``devices()`` differs (``devices()`` is re-read every tick, so a source may change it on its own).
* The kubelet: a server whose socket vanished is restarted; every server is (re-)registered on
  ``<plugin dir>/kubelet.sock`` when it is new, restarted, or the kubelet socket is a new file (inode or
  mtime: the kubelet restarted). A failed registration is retried every ``RETRY_SECONDS``.
* ``ctx.set_ready``: True once sources are loaded and every one is registered with the current kubelet.

Servers are stopped (sockets removed) when the loop ends; nothing in a pass ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import ReloadLog
from gpu_operator.agents.shared.netpluginserver import OPTIONS, AllocateError, PluginSource, SourceServer
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME
from gpu_operator.kubelet.registration import register

__all__ = ["AllocateError", "PluginRunner", "PluginSource", "serve_plugins"]

log = logging.getLogger(__name__)

#: How often sockets and device lists are looked at: a plugin that re-registers within ~0.1 s of a kubelet
#: restart is in the kubelet's first node status update (see agents/deviceplugin/plugin.py).
TICK_SECONDS = 0.1
#: Retry delay for a failed first load and for failed registrations.
RETRY_SECONDS = 2.0
REGISTER_TIMEOUT_SECONDS = 5.0

Key = tuple[str, str]  # (resource name, endpoint)
Loader = Callable[[], Sequence[PluginSource]]


class PluginRunner:
    """The state of :func:`serve_plugins` (tests drive :meth:`tick` directly)."""

    def __init__(
        self, *, ctx: AgentContext, load: Loader, refresh_seconds: float, name: str, reload: ReloadLog | None = None
    ) -> None:
        self.ctx = ctx
        self.reload = reload
        self.name = name
        self.refresh_seconds = refresh_seconds
        self._load = load
        self.servers: dict[Key, SourceServer] = {}
        self.loaded = False
        self.registrations = 0  # successful Register calls (tests, logs)
        self.last_error: str | None = None
        self._registered: set[Key] = set()
        self._kubelet_id: tuple[int, int] | None = None
        self._next_load = 0.0
        self._next_register = 0.0

    # -- sources -------------------------------------------------------------------------------------

    def _checked_load(self) -> dict[Key, PluginSource]:
        sources = list(self._load())
        wanted: dict[Key, PluginSource] = {}
        for source in sources:
            key = (source.resource_name, source.endpoint)
            for other in wanted:
                if source.resource_name == other[0] or source.endpoint == other[1]:
                    raise ValueError(f"two sources serve {other[0]} on {other[1]} and {key[0]} on {key[1]}")
            wanted[key] = source
        return wanted

    def _error(self, message: str) -> None:
        if message != self.last_error:
            log.error("%s: %s", self.name, message)
        self.last_error = message

    async def load(self) -> bool:
        """Call the loader and apply its sources; False (logged, nothing changed) when it failed."""
        try:
            wanted = await asyncio.to_thread(self._checked_load)
        except Exception as error:
            kept = "keeping the previous resources" if self.loaded else "nothing served yet"
            self._error(f"loading resources failed ({kept}): {type(error).__name__}: {error}")
            return False
        finally:
            if self.reload is not None:
                await self.reload.flush()
        await self.apply(wanted)
        self.loaded = True
        self.last_error = None
        return True

    async def apply(self, wanted: dict[Key, PluginSource]) -> None:
        for key in [k for k in self.servers if k not in wanted]:
            log.info("%s: %s no longer configured; stopping its server", self.name, key[0])
            await self.servers.pop(key).stop()
            self._registered.discard(key)
        for key, source in wanted.items():
            server = self.servers.get(key)
            if server is not None:
                if server.update(source):
                    log.info("%s: %s now advertises %d devices", self.name, key[0], len(server.devices))
                continue
            server = SourceServer(source=source, plugin_dir=self.ctx.plugin_dir)
            try:
                await server.start()
            except Exception as error:  # e.g. a socket path too long: the next load tries again
                self._error(f"cannot serve {key[0]} on {server.socket}: {type(error).__name__}: {error}")
                continue
            log.info("%s: serving %s (%d devices) on %s", self.name, key[0], len(server.devices), server.socket)
            self.servers[key] = server

    def _refresh_devices(self) -> None:
        for key, server in self.servers.items():
            try:
                if server.refresh():
                    log.info("%s: %s now advertises %d devices", self.name, key[0], len(server.devices))
            except Exception as error:
                self._error(f"{key[0]}: reading its devices failed: {type(error).__name__}: {error}")

    # -- kubelet -------------------------------------------------------------------------------------

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = (self.ctx.plugin_dir / KUBELET_SOCKET_NAME).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return (st.st_ino, st.st_mtime_ns)

    async def _restart_lost(self) -> None:
        for key, server in self.servers.items():
            if server.serving:
                continue
            log.info("%s: socket %s gone (kubelet restart?); serving %s again", self.name, server.socket, key[0])
            self._registered.discard(key)
            await server.stop()
            try:
                await server.start()
            except Exception as error:
                self._error(f"cannot serve {key[0]} on {server.socket}: {type(error).__name__}: {error}")

    async def _register_pending(self, now: float) -> None:
        pending = [k for k, s in self.servers.items() if k not in self._registered and s.serving]
        if not pending or now < self._next_register:
            return
        for key in pending:
            server = self.servers[key]
            try:
                await register(
                    kubelet_socket=self.ctx.plugin_dir / KUBELET_SOCKET_NAME,
                    endpoint=server.socket.name,
                    resource_name=key[0],
                    options=OPTIONS,
                    timeout=REGISTER_TIMEOUT_SECONDS,
                )
            except Exception as error:  # grpc.aio.AioRpcError: rejected, or no kubelet answering
                details = error.details() if hasattr(error, "details") else str(error)
                self._error(f"registering {key[0]} failed (retrying): {details}")
                self._next_register = now + RETRY_SECONDS
                continue
            self._registered.add(key)
            self.registrations += 1
            log.info("%s: registered %s (endpoint %s)", self.name, key[0], server.socket.name)

    async def check_kubelet(self, now: float) -> None:
        """Restart servers whose socket vanished; register what the current kubelet does not have."""
        await self._restart_lost()
        kubelet = self._kubelet_identity()
        if kubelet != self._kubelet_id:
            if self._kubelet_id is not None:
                log.info("%s: kubelet socket changed (kubelet restarted); registering again", self.name)
            self._kubelet_id = kubelet
            self._registered.clear()
            self._next_register = now
        if kubelet is not None:
            await self._register_pending(now)

    @property
    def ready(self) -> bool:
        return (
            self.loaded
            and self._kubelet_id is not None
            and all(k in self._registered and s.serving for k, s in self.servers.items())
        )

    # -- loop ----------------------------------------------------------------------------------------

    async def tick(self) -> None:
        """One pass: load when due, push device changes, converge sockets and registrations."""
        now = asyncio.get_running_loop().time()
        if now >= self._next_load:
            await self.load()
            if not self.loaded:
                retry = min(RETRY_SECONDS, self.refresh_seconds) if self.refresh_seconds > 0 else RETRY_SECONDS
                self._next_load = now + retry
            else:
                self._next_load = now + self.refresh_seconds if self.refresh_seconds > 0 else math.inf
        self._refresh_devices()
        await self.check_kubelet(now)
        self.ctx.set_ready(self.ready)

    async def close(self) -> None:
        servers, self.servers = list(self.servers.values()), {}
        self._registered.clear()
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self.tick()
                except Exception:  # level-triggered: log, keep serving, the next tick tries again
                    log.exception("%s: pass failed", self.name)
                if await self.ctx.sleep(TICK_SECONDS):
                    break
        finally:
            self.ctx.set_ready(False)
            await self.close()


async def serve_plugins(
    *, ctx: AgentContext, load: Loader, refresh_seconds: float, name: str, reload: ReloadLog | None = None
) -> None:
    """Serve ``load()``'s sources to the kubelet until ``ctx.sleep()`` says stop (see the module docstring)."""
    await PluginRunner(ctx=ctx, load=load, refresh_seconds=refresh_seconds, name=name, reload=reload).run()
