"""``gpu-operator agent driver``: the driver container's main process.

Start: PID file, ``.driver-daemons-status=NotReady``; when the modules are loaded and
``/run/nvidia/nvidia-driver.state`` holds this ``DRIVER_CONFIG_DIGEST`` (and no ``FORCE_REINSTALL``),
only the user-space side is set up again (the restart-only fast path); otherwise install for the
running kernel and load ``nvidia``, ``nvidia-uvm``, ``nvidia-modeset``. ``nvidia-peermem`` (GPUDirect RDMA)
is not loaded here: it needs the Mellanox stack, so the ``nvidia-peermem-ctr`` side-car (``peermem``)
loads it once MOFED is ready. Then the root is exposed at ``/run/nvidia/driver``, the digest written,
``.driver-daemons-status=Ready`` and, as the startup probe would, ``.driver-ctr-ready`` written atomically
with the feature flags the validator reads. On stop (preStop + SIGTERM): both hidden files removed,
and with ``UNLOAD_ON_EXIT`` (default true) the modules unloaded and the root released.

Install and module loading go through the driver host of ``steps.driver_host``: the real host in a
driver container, the simulated one (loading takes ``SIMULATED_MODULE_LOAD_SECONDS``) on simulated nodes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path

from gpu_operator.agents.drivermanager.modules import LOAD_ORDER, DriverHost, ModuleError, unload_all
from gpu_operator.agents.drivermanager.steps import DRIVER_ROOT, PID_FILE, STATE_FILE, driver_host
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.api.envtext import env_flag, env_text

log = logging.getLogger(__name__)
VALIDATIONS = "/run/nvidia/validations"
DAEMONS_STATUS = f"{VALIDATIONS}/.driver-daemons-status"
CTR_READY = f"{VALIDATIONS}/.driver-ctr-ready"


class DriverError(Exception):
    """The driver could not be installed or loaded; the message says why."""


class DriverSettingsError(DriverError, ConfigRefusedError):
    """A variable of the driver container's environment it cannot use; one line naming it."""


# A driver version (``595.91.07``) and a kernel release (``5.15.0-119-generic``): both end up in paths
# and in files other containers read, so a newline or a '/' in them is refused, not passed on.
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")
_DIGEST = re.compile(r"[A-Za-z0-9._:+=-]+")
FEATURE_FLAGS = ("GDRCOPY_ENABLED", "GDS_ENABLED", "GPU_DIRECT_RDMA_ENABLED")


def _flag(env: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    try:
        return env_flag(env, name, default=default)
    except ConfigRefusedError as error:
        raise DriverSettingsError(str(error)) from None


def _text(env: Mapping[str, str], name: str, *, pattern: re.Pattern[str], what: str, limit: int) -> str:
    try:
        return env_text(env, name, default="", pattern=pattern, what=what, limit=limit)
    except ConfigRefusedError as error:
        raise DriverSettingsError(str(error)) from None


def _write(path: Path, text: str) -> None:
    """Atomically (readers never see half a file), as the startup probe writes ``.driver-ctr-ready``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def ready_file_content(env: Mapping[str, str]) -> str:
    return "".join(f"{name}={'true' if _flag(env, name) else 'false'}\n" for name in FEATURE_FLAGS)


class Driver:
    """The driver container's work on one node (synchronous: run it in a thread)."""

    def __init__(self, *, ctx: AgentContext, host: DriverHost) -> None:
        self.ctx, self.host = ctx, host
        self.env = ctx.env
        # Every variable is checked here, before anything is written or loaded (``main`` builds this first).
        self.version = _text(self.env, "DRIVER_VERSION", pattern=_VERSION, what="a driver version", limit=63)
        self.digest = _text(self.env, "DRIVER_CONFIG_DIGEST", pattern=_DIGEST, what="a config digest", limit=128)
        kernel = _text(self.env, "KERNEL_VERSION", pattern=_VERSION, what="a kernel release", limit=128)
        self.kernel = kernel or platform.release()
        self.force_reinstall = _flag(self.env, "FORCE_REINSTALL")
        self.unload_on_exit = _flag(self.env, "UNLOAD_ON_EXIT", default=True)
        self.ready_content = ready_file_content(self.env)
        self.name = f"driver[{ctx.node_name}]"

    def _path(self, path: str) -> Path:
        return self.ctx.path(path)

    def fast_path(self) -> bool:
        if not self.digest or self.force_reinstall or "nvidia" not in self.host.loaded():
            return False
        try:
            return self._path(STATE_FILE).read_text(encoding="utf-8").strip() == self.digest
        except OSError:
            return False

    def start(self) -> str:
        if not self.version:
            raise DriverError("DRIVER_VERSION is required")
        _write(self._path(PID_FILE), f"{os.getpid()}\n")
        _write(self._path(DAEMONS_STATUS), "NotReady\n")
        if self.fast_path():
            how = f"driver {self.version} already loaded with the same config digest: user space only"
        else:
            try:
                unload_all(self.host)  # an old driver must go before the new one loads
                self.host.install(version=self.version, kernel=self.kernel)
                for module in LOAD_ORDER:
                    self.host.load(module)
            except ModuleError as error:
                raise DriverError(str(error)) from error
            how = f"driver {self.version} installed for kernel {self.kernel} and loaded"
        self.host.expose_root(self._path(DRIVER_ROOT))
        if self.digest:
            _write(self._path(STATE_FILE), self.digest + "\n")
        _write(self._path(DAEMONS_STATUS), "Ready\n")
        _write(self._path(CTR_READY), self.ready_content)
        return how

    def stop(self) -> None:
        for path in (CTR_READY, DAEMONS_STATUS):
            self._path(path).unlink(missing_ok=True)
        if self.unload_on_exit:
            try:
                unload_all(self.host)
            except ModuleError as error:
                log.warning("%s: modules left loaded: %s", self.name, error)
            self.host.release_root(self._path(DRIVER_ROOT))
        self._path(PID_FILE).unlink(missing_ok=True)


async def main(ctx: AgentContext) -> None:
    """Install and load the driver, report ready, and hold until stopped."""
    driver = Driver(ctx=ctx, host=driver_host(ctx))
    try:
        how = await asyncio.to_thread(driver.start)
    except DriverError as error:
        log.error("%s: %s", driver.name, error)
        ctx.set_ready(False)
        raise
    log.info("%s: %s", driver.name, how)
    ctx.set_ready(True)
    try:
        await ctx.sleep(None)
    finally:
        ctx.set_ready(False)
        await asyncio.to_thread(driver.stop)
