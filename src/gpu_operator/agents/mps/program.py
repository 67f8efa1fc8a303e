"""``gpu-operator agent mps-control-daemon``: the MPS control daemons of a node's MPS-shared resources.

The resources come from the device plugin's own config (the same ConfigMap entry, chosen by the same
``nvidia.com/device-plugin.config`` label) and the node's GPUs: every resource shared through
``sharing.mps`` gets a daemon (see ``daemons``). The loop keeps them matching: a config change stops
daemons no longer wanted and starts new ones, and a daemon that stops answering is started again, its
ready marker withdrawn meanwhile, so the plugin never hands out a pipe with no daemon behind it. On
stop every daemon is told to quit and its marker removed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from gpu_operator.agents.mps import daemons
from gpu_operator.agents.mps.daemons import DaemonSpec, MpsError
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings
from gpu_operator.agents.shared.resources import LayoutError, build_resources
from gpu_operator.api.envtext import env_duration
from gpu_operator.gpu.backend import GpuBackend, GpuError

log = logging.getLogger(__name__)
DEFAULT_CHECK_INTERVAL = 5.0


def check_interval(env: Mapping[str, str]) -> float:
    """``MPS_CHECK_INTERVAL``: seconds (``5``) or a duration (``5s``) from 100ms to 1h between checks."""
    value = env_duration(env, "MPS_CHECK_INTERVAL", default=DEFAULT_CHECK_INTERVAL, minimum=0.1, maximum=3600.0)
    return DEFAULT_CHECK_INTERVAL if value is None else value


def wanted(*, backend: GpuBackend, settings: Settings) -> list[DaemonSpec]:
    """One daemon per MPS-shared resource, over that resource's GPUs."""
    devices = list(backend.devices())
    memory = {d.uuid: d.memory_mib for d in devices}
    out = []
    for resource in build_resources(devices=devices, mig={}, settings=settings):
        if resource.shared_mode != "mps":
            continue
        uuids = tuple(dict.fromkeys(d.physical_uuid for d in resource.physical))
        out.append(DaemonSpec(resource=resource.name, replicas=resource.replicas, uuids=uuids,
                              memory_mib=tuple(memory.get(u, 0) for u in uuids)))  # fmt: skip
    return out


class Daemons:
    """The running daemons and one reconcile step; each daemon is stopped with the tool and under the
    MPS root it was started with."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.configs = NamedConfigs(ctx)
        self.running: dict[str, tuple[DaemonSpec, Path, Path]] = {}  # resource -> (spec, tool, MPS root)
        self.problem = ""

    async def step(self) -> None:
        settings = await self.configs.settings()
        specs = {s.resource: s for s in await asyncio.to_thread(wanted, backend=self.ctx.gpu, settings=settings)}
        for name, (spec, binary, root) in list(self.running.items()):
            if specs.get(name) != spec:
                await asyncio.to_thread(daemons.stop, binary, spec, mps_root=root)
                del self.running[name]
        if not specs:
            return
        # The plugin's own MPS root (a config sharing through MPS is refused without one).
        root = self.ctx.path(settings.mps_root)
        host_root = self.ctx.host_path("/")
        binary = daemons.find_control(env=self.ctx.env, host_root=host_root, driver_root=settings.driver_root)
        for name, spec in specs.items():
            if name in self.running and await asyncio.to_thread(daemons.answers, binary, spec, mps_root=root):
                continue
            if name in self.running:
                log.warning("mps[%s]: the daemon for %s stopped answering; starting it again", self.ctx.node_name, name)
            await asyncio.to_thread(daemons.start, binary, spec, mps_root=root)
            self.running[name] = (spec, binary, root)

    async def stop_all(self) -> None:
        for spec, binary, root in self.running.values():
            await asyncio.to_thread(daemons.stop, binary, spec, mps_root=root)
        self.running.clear()


async def main(ctx: AgentContext) -> None:
    """Keep the node's MPS control daemons running until the container is stopped."""
    interval = check_interval(ctx.env)  # before any daemon starts: a bad value stops the agent with one line
    state = Daemons(ctx)
    try:
        while True:
            try:
                await state.step()
                state.problem = ""
            except (ConfigError, LayoutError, MpsError, GpuError, OSError) as error:
                if str(error) != state.problem:
                    log.error("mps[%s]: %s", ctx.node_name, error)
                state.problem = str(error)
            ctx.set_ready(not state.problem and bool(state.running))
            if await ctx.sleep(interval):
                break
    finally:
        await state.stop_all()
