"""``gpu-operator agent ofed-driver``: the OFED (DOCA) driver container's main process, upstream's order.

Start: ``.driver-ready`` removed first (one a crashed container left says nothing), then the swap:
storage-over-RDMA modules (``ib_isert``, ``nvme_rdma``, ...) hold the stack, so with
``UNLOAD_STORAGE_MODULES=true`` they are unloaded, otherwise the agent stops with an error naming
them and the variable; when the loaded ``mlx5_core`` is already the build it would load
(``srcversion``), nothing is reloaded; otherwise the loaded modules go, dependants first
(``nvidia_peermem``, the mlx5 auxiliary drivers, the RDMA CM, verbs, ``mlx5_ib``, ``mlx5_core``,
``ib_core``), and the driver's are loaded. Then the driver's sources are exposed under
``/run/mellanox/drivers/usr/src/ofa_kernel`` and, last, ``/run/mellanox/drivers/.driver-ready`` is
written: the startup probe, the GPU driver's peer-memory side-car and the ``mofed.wait`` gate all take
that file as "loaded". The agent reports Ready and holds.

Stop (SIGTERM): ``.driver-ready`` removed first, so nothing takes the driver as loaded while it goes;
with ``RESTORE_DRIVER_ON_POD_TERMINATION`` (upstream's default: true) the driver's modules are
unloaded and the host's own modules that were loaded before the swap loaded back, and the exported
root released. A crashed container unloads nothing (a dead process cannot); the next start swaps again.

The host interface (``modules``): the real host, a simulated node (chosen when the host's ``/sys``
under ``HOST_ROOT`` is not the kernel's, or ``OFED_BACKEND=simulated``) with its injected faults, or
``OFED_BACKEND=null``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.ofed.modules import (
    FAIL,
    HANG,
    LOAD_MODULES,
    STORAGE_MODULES,
    UNLOAD_ORDER,
    HostOfed,
    ModuleError,
    NullOfed,
    OfedHost,
    SimulatedOfed,
)
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.api.envtext import env_flag, env_text
from gpu_operator.names import network as net

log = logging.getLogger(__name__)
BACKENDS = ("host", "simulated", "null")


class OfedError(Exception):
    """The driver could not be loaded; the message says why."""


class OfedSettingsError(OfedError, ConfigRefusedError):
    """A variable of the driver container's environment it cannot use; one line naming it."""


# A driver version as Mellanox tags it (``25.04-0.6.1.0-2``); it is written into ``.driver-ready``,
# so a newline or a shell word in it would reach whoever reads that file.
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")


@dataclass(frozen=True, kw_only=True)
class OfedSettings:
    """The driver container's environment, read and checked before any module is touched."""

    backend: str = ""  # "": chosen from the host root
    version: str = ""
    unload_storage: bool = False
    restore_on_termination: bool = True


def settings_from_env(env: Mapping[str, str]) -> OfedSettings:
    """:class:`OfedSettings` from ``env``; OfedSettingsError naming the variable for a bad value."""
    backend = env.get("OFED_BACKEND", "").strip().lower()
    if backend and backend not in BACKENDS:  # repr of at most 60 characters: one line
        shown = repr(backend[:60]) + ("..." if len(backend) > 60 else "")
        raise OfedSettingsError(f"OFED_BACKEND: {shown} is not one of {', '.join(BACKENDS)}")
    try:
        return OfedSettings(
            backend=backend,
            version=env_text(
                env, "NVIDIA_NIC_DRIVER_VER", default="", pattern=_VERSION, what="a driver version", limit=63
            ),
            unload_storage=env_flag(env, "UNLOAD_STORAGE_MODULES", default=False),
            restore_on_termination=env_flag(env, "RESTORE_DRIVER_ON_POD_TERMINATION", default=True),
        )
    except ConfigRefusedError as error:
        raise OfedSettingsError(str(error)) from None


def open_host(ctx: AgentContext) -> OfedHost:
    """``OFED_BACKEND`` (host, simulated, null); unset: the real host when ``HOST_ROOT``'s /sys is the
    kernel's (a mount, or it has ``kernel/``), else a simulated node's files."""
    settings = settings_from_env(ctx.env)
    chosen = settings.backend
    sys_root = ctx.host_path("/sys")
    if not chosen:
        chosen = "host" if os.path.ismount(sys_root) or (sys_root / "kernel").is_dir() else "simulated"
    if chosen == "null":
        return NullOfed()
    if chosen == "simulated":
        return SimulatedOfed(host_root=ctx.host_path("/"), version=settings.version)
    return HostOfed(sys_root=sys_root, host_root=ctx.host_path("/"))


class Ofed:
    """The driver container's work on one node (blocking host calls: run them in a thread)."""

    def __init__(self, *, ctx: AgentContext, host: OfedHost) -> None:
        self.ctx, self.host = ctx, host
        self.settings = settings_from_env(ctx.env)
        self.drivers = ctx.path(net.DRIVERS_DIR)
        self.ready_file = self.drivers / Path(net.DRIVER_READY).name
        self.name = f"ofed-driver[{ctx.node_name}]"
        self.before: list[str] = []  # the host's modules of LOAD_MODULES loaded before the swap
        self.swapped = False
        self.touched = False  # prepare() began unloading the host's modules

    def clear_ready(self) -> None:
        self.drivers.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)

    def prepare(self) -> bool:
        """Check what blocks a swap and unload what must go; False when the driver is loaded already."""
        loaded = self.host.loaded()
        storage = [m for m in STORAGE_MODULES if m in loaded]
        if storage and not self.settings.unload_storage:
            raise OfedError(
                f"storage modules {', '.join(storage)} hold the RDMA stack: set UNLOAD_STORAGE_MODULES=true "
                "in ofedDriver.env to unload them before the driver loads"
            )
        target = self.host.target_srcversion("mlx5_core")
        if "mlx5_core" in loaded and target and self.host.srcversion("mlx5_core") == target:
            return False
        self.before = [m for m in LOAD_MODULES if m in loaded]
        self.touched = True  # from here on the host's modules change: a failure must restore them
        self.unload([*storage, *UNLOAD_ORDER], loaded=loaded)
        return True

    def unload(self, order: list[str], *, loaded: list[str]) -> None:
        for module in order:
            if module not in loaded:
                continue
            users = self.host.users(module)
            if users > 0:
                raise OfedError(f"cannot unload {module}: held by {users} user(s) (a process or an unknown module)")
            try:
                self.host.unload(module)
            except ModuleError as error:
                raise OfedError(str(error)) from error

    def load(self) -> None:
        try:
            for module in LOAD_MODULES:
                self.host.load(module)
        except ModuleError as error:
            raise OfedError(str(error)) from error
        self.swapped = True

    def publish(self) -> None:
        """The exported root, then ``.driver-ready`` last."""
        try:
            self.host.expose_root(self.drivers)
        except ModuleError as error:
            raise OfedError(str(error)) from error
        version = self.settings.version
        tmp = self.ready_file.with_name(f"{self.ready_file.name}.tmp")
        tmp.write_text(f"{version}\n" if version else "", encoding="utf-8")
        tmp.replace(self.ready_file)

    def recover(self) -> None:
        """After a failed load: take out what loaded and bring back the host's own modules (best effort),
        so a failed swap never leaves the node without a NIC driver (upstream's #2176)."""
        try:
            self.unload(list(UNLOAD_ORDER), loaded=self.host.loaded())
            self.host.restore(self.before)
        except (OfedError, ModuleError) as error:
            log.error("%s: the host's driver was not restored after the failed load: %s", self.name, error)

    def stop(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        if not self.settings.restore_on_termination or not self.swapped:
            return
        try:
            self.unload(list(UNLOAD_ORDER), loaded=self.host.loaded())
            self.host.release_root(self.drivers)
            self.host.restore(self.before)
        except (OfedError, ModuleError) as error:
            log.warning("%s: the host's driver was not restored: %s", self.name, error)


async def main(ctx: AgentContext) -> None:
    """Load the driver, write ``.driver-ready``, report Ready, hold; restore on stop."""
    host = open_host(ctx)
    ofed = Ofed(ctx=ctx, host=host)
    ofed.clear_ready()
    try:
        swap = await asyncio.to_thread(ofed.prepare)
        mode, seconds = host.fault() if swap else ("", 0.0)
        if await ctx.sleep(seconds):
            return
        if mode == FAIL:
            raise OfedError(f"loading the OFED driver {ofed.settings.version} failed (simulated)")
        if swap and mode != HANG:
            await asyncio.to_thread(ofed.load)
        if mode != HANG:
            await asyncio.to_thread(ofed.publish)
            log.info("%s: driver %s", ofed.name, "loaded" if swap else "already loaded: kept")
            ctx.set_ready(True)
    except OfedError as error:
        log.error("%s: %s", ofed.name, error)
        ctx.set_ready(False)
        if ofed.touched:  # the host's modules were unloaded for ours: put them back before the container exits
            await asyncio.to_thread(ofed.recover)
        raise
    # A crash raises out of sleep: a dead container unloads nothing.
    await ctx.sleep(None)
    ctx.set_ready(False)
    await asyncio.to_thread(ofed.stop)
