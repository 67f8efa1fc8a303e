"""``gpu-operator agent toolkit``: install the runtime wrappers, configure the runtime, keep the CDI spec current.

Start: write the executables into ``<ROOT>/toolkit``, edit the runtime's configuration (only files
whose content changes are written; only a change restarts the runtime), write the CDI spec of the
node's GPUs and MIG devices, and report Ready. Then, every ``CDI_REFRESH_INTERVAL`` seconds (5 s by
default), re-read the devices and rewrite the spec when they changed: after a MIG reconfiguration or a
driver change a stale spec would make containers fail with "unresolvable CDI devices". On stop the
runtime configuration is reverted (``CLEANUP_ON_EXIT``, default true, as upstream), the executables
stay (running containers' shims still call them). ``NO_DAEMON`` exits after configuring.

A file that cannot be edited (not valid TOML/JSON, an unexpected structure) is never overwritten:
the agent logs the file and the reason, stays not-Ready and retries every minute.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared import cdi
from gpu_operator.agents.shared.files import ConfigFileError, remove, write_atomic
from gpu_operator.agents.toolkit import configure, install
from gpu_operator.agents.toolkit.settings import SettingsError, ToolkitSettings, settings_from_env
from gpu_operator.gpu.backend import GpuBackend, GpuError

log = logging.getLogger(__name__)
PID_FILE = "/run/nvidia/toolkit/toolkit.pid"
RETRY_SECONDS = 60.0


def _true(value: str | None, *, default: bool) -> bool:
    if value is None or not value.strip():
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


class Toolkit:
    """The toolkit's work on one node; every method is synchronous file work (run it in a thread)."""

    def __init__(self, *, ctx: AgentContext, settings: ToolkitSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.name = f"toolkit[{ctx.node_name}]"

    def host(self, path: str) -> Path:
        return self.ctx.host_path(path)

    @property
    def state_path(self) -> Path:
        return self.host(self.settings.toolkit_dir) / configure.STATE_FILE

    def _ours(self) -> frozenset[str]:
        return frozenset({self.settings.drop_in} if self.settings.drop_in else set())

    def _restart(self) -> str:
        s = self.settings
        return configure.restart(
            mode=s.restart_mode,
            name=s.runtime,
            unit=s.systemd_unit,
            socket_path=self.host(s.socket),
            host_root=self.host("/"),
        )

    def install(self) -> list[Path]:
        return install.install(self.host(self.settings.toolkit_dir), settings=self.settings)

    def configure(self) -> list[str]:
        """Edit the runtime's configuration; returns the changed host paths (restarting the runtime if any)."""
        plan = configure.plan_configure(settings=self.settings, read=configure.reader(self.host))
        state = configure.merge_previous(configure.load_state(self.state_path), new=plan.previous)
        # The state goes first: a crash between the two writes must never lose how to undo them.
        configure.save_state(self.state_path, state=state)
        changed = configure.apply(plan, host=self.host, ours=self._ours())
        if changed:
            log.info("%s: wrote %s; %s", self.name, ", ".join(changed), self._restart())
        else:
            log.info("%s: %s configuration already up to date", self.name, self.settings.runtime)
        return changed

    def unconfigure(self) -> list[str]:
        state = configure.load_state(self.state_path)
        plan = configure.plan_unconfigure(settings=self.settings, read=configure.reader(self.host), state=state)
        changed = configure.apply(plan, host=self.host, ours=self._ours())
        configure.save_state(self.state_path, state={})
        if changed:
            log.info("%s: reverted %s; %s", self.name, ", ".join(changed), self._restart())
        return changed

    def spec(self, backend: GpuBackend) -> dict[str, object]:
        devices = list(backend.devices())
        mig = {d.index: list(backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
        files = cdi.discover(root=self.host(self.settings.driver_root), version=backend.driver_version())
        return cdi.build_spec(
            devices=devices,
            mig=mig,
            files=files,
            driver_root=self.settings.driver_root,
            dev_root=self.settings.dev_root,
            hook_path=f"{self.settings.toolkit_dir}/{install.HOOK}",
        )

    def refresh_cdi(self) -> bool:
        """Rewrite the CDI spec if the devices changed; True when it was written."""
        path = self.host(self.settings.cdi_dir) / cdi.spec_file_name()
        written = write_atomic(path, cdi.render(self.spec(self.ctx.gpu)), backup=False)
        if written:
            log.info("%s: CDI spec %s updated", self.name, path)
        return written

    def write_pid(self, *, present: bool) -> None:
        path = self.host(PID_FILE)
        if present:
            write_atomic(path, f"{os.getpid()}\n", backup=False)
        else:
            remove(path)


async def _setup(toolkit: Toolkit) -> bool:
    """Install and configure; False (logged) when a file cannot be used yet."""
    try:
        await asyncio.to_thread(toolkit.install)
        await asyncio.to_thread(toolkit.configure)
        await asyncio.to_thread(toolkit.write_pid, present=True)
    except ConfigFileError as error:
        log.error("%s: %s", toolkit.name, error)
        return False
    return True


async def _refresh(toolkit: Toolkit) -> None:
    try:
        await asyncio.to_thread(toolkit.refresh_cdi)
    except (GpuError, ConfigFileError) as error:
        # No driver yet, a GPU lost, a full disk: the previous spec stays until the next refresh works.
        log.warning("%s: CDI spec not refreshed: %s", toolkit.name, error)


async def main(ctx: AgentContext) -> None:
    """Configure the node's runtime for NVIDIA GPUs and keep the CDI spec current until stopped."""
    try:
        settings = settings_from_env(ctx.env)
        interval = float(ctx.env.get("CDI_REFRESH_INTERVAL", "5"))
    except (SettingsError, ValueError) as error:
        log.error("toolkit[%s]: %s", ctx.node_name, error)
        ctx.set_ready(False)
        await ctx.sleep(None)
        return
    toolkit = Toolkit(ctx=ctx, settings=settings)
    while not await _setup(toolkit):
        ctx.set_ready(False)
        if await ctx.sleep(RETRY_SECONDS):
            return
    await _refresh(toolkit)
    ctx.set_ready(True)
    if _true(ctx.env.get("NO_DAEMON"), default=False):
        return
    try:
        while not await ctx.sleep(interval):
            await _refresh(toolkit)
    finally:
        if _true(ctx.env.get("CLEANUP_ON_EXIT"), default=True):
            try:
                await asyncio.to_thread(toolkit.unconfigure)
            except ConfigFileError as error:
                log.error("%s: configuration not reverted: %s", toolkit.name, error)
        await asyncio.to_thread(toolkit.write_pid, present=False)
