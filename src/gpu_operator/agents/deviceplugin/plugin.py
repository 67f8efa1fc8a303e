"""The device plugin's manager: discover devices, serve and register every resource, keep it that way.

Level-triggered: every ``interval`` it checks that the kubelet socket is the one it registered with
and that its own sockets still exist (a kubelet restart deletes them) and, if not, restarts its
servers and registers again (between passes that check alone runs every ``KUBELET_WATCH_SECONDS``,
so a restarted kubelet is answered at once); it also re-reads the settings and, when they changed and are valid,
rebuilds the resources. An invalid config keeps the previous one serving (before any good one: nothing is
served); each new bad version is logged once, counted (``config_log``, the metric
``gpu_operator_device_plugin_config_reload_failures_total``) and reported in a Node Event. Health
events are read by one thread per plugin (backend waits block) and pushed to the streams; the same
thread brings devices back when the recovery policy says so (``health``), and every health change is
counted and reported on the event loop (``healthreport``), so the plugin never needs a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from gpu_operator.agents.deviceplugin import mps
from gpu_operator.agents.deviceplugin.allocation import Topology
from gpu_operator.agents.deviceplugin.health import HealthBook, RecoveryPolicy, Transition, XidPolicy
from gpu_operator.agents.deviceplugin.healthreport import PREFIX, EventSink, HealthReport
from gpu_operator.agents.deviceplugin.server import OPTIONS, ResourceServer
from gpu_operator.agents.shared.configinput import ReloadLog
from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings
from gpu_operator.agents.shared.resources import LayoutError, Resource, build_resources
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.gpu.types import Device, MigDevice
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME
from gpu_operator.kubelet.registration import register

log = logging.getLogger(__name__)

SettingsSource = Callable[[], Awaitable[Settings]]
#: How often, between passes, the kubelet's socket is looked at (a stat): measured on a real kubelet, a
#: plugin re-registering within 0.1 s of its restart has the GPUs allocatable again in 1.4 s, at 0.25 s
#: or later only after the kubelet's next node status update (10.8 s).
KUBELET_WATCH_SECONDS = 0.05


class DevicePlugin:
    """Serves the node's GPUs to one kubelet until ``stop`` is set."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        settings: SettingsSource,
        plugin_dir: Path,
        env: Mapping[str, str],
        interval: float = 0.25,
        name: str = "device-plugin",
        events: EventSink | None = None,
    ) -> None:
        self.backend = backend
        self.plugin_dir = plugin_dir
        self.interval = interval
        self.name = name
        self._settings_source = settings
        self._policy = XidPolicy.from_env(env)
        self.settings: Settings | None = None
        self.servers: list[ResourceServer] = []
        self.health = HealthBook(policy=self._policy, recovery=RecoveryPolicy.from_env(env))
        self.report = HealthReport(unhealthy_now=self.health.unhealthy_count, events=events, name=name)
        self.config_log = ReloadLog(name=name, source="the config", events=events, metric_prefix=PREFIX)
        self.registrations = 0  # how many times resources were registered (tests and metrics)
        self.last_error: str | None = None
        self._kubelet_id: tuple[int, int] | None = None
        self._stop_health = threading.Event()
        self._topology: Topology | None = None
        self._layout: tuple[object, ...] = ()
        self._passes = 0

    # -- discovery ---------------------------------------------------------------------------------

    def _discover(self, settings: Settings) -> list[Resource]:
        devices = list(self.backend.devices())
        mig: dict[int, list[MigDevice]] = {
            d.index: list(self.backend.mig_devices(d.index)) for d in devices if d.mig_enabled
        }
        if self._topology is None:
            self._topology = Topology.from_links(self.backend.topology())  # computed once at start
        self.health.set_mig_parents({m.uuid: (devices[i].uuid, m.gi_id) for i, ms in mig.items() for m in ms})
        resources = build_resources(devices=devices, mig=mig, settings=settings)
        self._layout = (_fingerprint(devices, mig), mps.readiness(resources, settings))
        serve, waiting = mps.split_ready(resources, settings)
        if waiting:
            log.warning(
                "%s: not advertising %s: MPS sharing needs a control daemon, and none is ready (%s missing)",
                self.name, ", ".join(waiting), mps.ready_marker(mps_root=settings.mps_root, resource=waiting[0]),
            )  # fmt: skip
        return serve

    def _layout_changed(self) -> bool:
        devices = list(self.backend.devices())
        mig = {d.index: list(self.backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
        ready: tuple[bool, ...] = ()
        if self.settings is not None and self.settings.sharing_mode == "mps":
            resources = build_resources(devices=devices, mig=mig, settings=self.settings)
            ready = mps.readiness(resources, self.settings)
        return (_fingerprint(devices, mig), ready) != self._layout

    # -- servers -------------------------------------------------------------------------------------

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = (self.plugin_dir / KUBELET_SOCKET_NAME).stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    async def _stop_servers(self) -> None:
        servers, self.servers = self.servers, []
        await asyncio.gather(*(s.stop() for s in servers))

    async def _start_and_register(self, resources: list[Resource], settings: Settings) -> None:
        await self._stop_servers()
        assert self._topology is not None
        servers = [
            ResourceServer(
                resource=r, settings=settings, health=self.health, topology=self._topology, plugin_dir=self.plugin_dir
            )
            for r in resources
            if r.devices
        ]
        if not servers:
            log.info("%s: no devices found; waiting", self.name)
        for server in servers:
            await server.start()
        self.servers = servers
        kubelet = self._kubelet_identity()
        if kubelet is None:
            return  # the kubelet is not up yet; the next pass registers
        for server in servers:
            await register(
                kubelet_socket=self.plugin_dir / KUBELET_SOCKET_NAME,
                endpoint=server.socket.name,
                resource_name=server.resource.name,
                options=OPTIONS,
            )
        self._kubelet_id = kubelet
        self.registrations += 1
        log.info("%s: registered %s", self.name, ", ".join(s.resource.name for s in servers) or "nothing")

    # -- health ------------------------------------------------------------------------------------

    def _health_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stop_health.is_set():
            try:
                events = self.backend.wait_health_events(timeout=0.5)
            except GpuError as exc:
                log.warning("%s: health events unavailable: %s", self.name, exc)
                self._stop_health.wait(1.0)
                continue
            changed = self.health.apply(events) if events else False
            changed |= self.health.expire()  # the quiet period, checked at least every half second
            transitions = self.health.take_transitions()
            if changed or transitions:
                loop.call_soon_threadsafe(self._on_health, transitions)

    def _on_health(self, transitions: list[Transition]) -> None:
        for server in self.servers:
            server.notify()  # every ListAndWatch stream re-sends the list with the new health
        self.report.record(transitions)

    # -- main loop -----------------------------------------------------------------------------------

    async def _settings_or_none(self) -> Settings | None:
        try:
            return await self._settings_source()
        except ConfigError as exc:
            self.config_log.refused(str(exc))  # logged once per new error, counted, an Event
            self.last_error = str(exc)
            return None

    async def reconcile(self) -> None:
        """One pass: settings, resources, sockets and registration converge."""
        settings = await self._settings_or_none()
        if settings is not None and settings != self.settings:
            try:
                resources = await asyncio.to_thread(self._discover, settings)
            except (LayoutError, GpuError) as exc:
                self.config_log.refused(f"cannot expose devices with this config: {exc}")
                self.last_error = str(exc)
            else:
                self.settings = settings
                self.last_error = None
                self.config_log.accepted()
                await self.config_log.flush()
                await self._start_and_register(resources, settings)
                return
        elif settings is not None:
            self.config_log.accepted()  # what the files say is what serves (again)
        await self.config_log.flush()
        if self.settings is None:
            return
        self._passes += 1
        if self._passes % max(1, int(4 / self.interval)) == 0:
            changed = await asyncio.to_thread(self._safe_layout_changed)
            if changed:
                # MIG geometry or GPU set changed (MIG manager, hot-plug): advertise the new devices, with the
                # settings that serve now: the file's if it still reads, else the last good ones it kept
                # (dropping them here would leave the plugin serving nothing until the file is fixed).
                log.info("%s: device layout changed; rebuilding resources", self.name)
                await self._rebuild(self.settings)
                return
        if self._kubelet_changed():
            log.info("%s: kubelet restarted or sockets removed; re-registering", self.name)
            await self._start_and_register([s.resource for s in self.servers] or self._resources(), self.settings)

    async def _rebuild(self, settings: Settings) -> None:
        try:
            resources = await asyncio.to_thread(self._discover, settings)
        except (LayoutError, GpuError) as exc:
            self.config_log.refused(f"cannot expose devices with this config: {exc}")
            self.last_error = str(exc)
            await self.config_log.flush()
            return
        await self._start_and_register(resources, settings)

    def _kubelet_changed(self) -> bool:
        """A new kubelet socket, or one of ours removed (a kubelet restart deletes them): two stats."""
        kubelet = self._kubelet_identity()
        lost_socket = any(not s.serving for s in self.servers)
        return kubelet is not None and (kubelet != self._kubelet_id or lost_socket)

    async def _watch_kubelet(self, *, stop: asyncio.Event) -> None:
        """Wait ``interval`` for the next pass, returning early when the kubelet restarted: a restarted
        kubelet publishes the Node's allocatable in its first status updates, and a plugin registering
        after those waits for the next periodic one (10 s by default)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.interval
        while not stop.is_set():
            left = until - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=min(left, KUBELET_WATCH_SECONDS))
            if self.settings is not None and self._kubelet_changed():
                return

    def _safe_layout_changed(self) -> bool:
        try:
            return self._layout_changed()
        except GpuError:
            return False
        except LayoutError:
            return True  # the new layout does not fit the config: the rebuild says why

    def _resources(self) -> list[Resource]:
        assert self.settings is not None
        return self._discover(self.settings)

    async def run(self, *, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._health_loop, args=(loop,), name=f"{self.name}-health", daemon=True)
        thread.start()
        try:
            while not stop.is_set():
                try:
                    await self.reconcile()
                except Exception as exc:  # level-triggered: log, keep serving, try again next pass
                    log.exception("%s: reconcile failed: %s", self.name, exc)
                    self.last_error = str(exc)
                await self._watch_kubelet(stop=stop)
        finally:
            self._stop_health.set()
            await self._stop_servers()
            await asyncio.to_thread(thread.join, 2.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.report.flush(), timeout=2.0)


def _fingerprint(devices: list[Device], mig: Mapping[int, list[MigDevice]]) -> tuple[object, ...]:
    return tuple((d.uuid, d.mig_enabled, tuple(m.uuid for m in mig.get(d.index, ()))) for d in devices)
