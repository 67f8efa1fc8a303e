"""Every node agent program by the name ``gpu-operator agent NAME`` runs it under, in one table.

The CLI runs one of them in a container; the simulator registers them all for its nodes. The names
are ``gpu_operator.render.agents.AGENTS`` (a unit test keeps the two equal), so the renderer never
deploys a command the image cannot run. A program's module is imported when the program is looked up:
a container runs one agent, and importing the other eighteen would cost every container start CPU
and time (``gpu_operator.cli.main`` says how much).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterator, Mapping

from gpu_operator.agents.runtime import AgentContext

Program = Callable[[AgentContext], Awaitable[None]]


async def sleep_program(ctx: AgentContext) -> None:
    """The validator DaemonSet's main container: ready, idle until stopped (upstream sleeps too)."""
    ctx.set_ready(True)
    while not await ctx.sleep(3600):
        pass


#: Each agent's name -> the module whose ``main`` it runs ("" for :func:`sleep_program`, defined here).
MODULES = {
    "sleep": "",
    "device-plugin": "gpu_operator.agents.deviceplugin.program",
    "feature-discovery": "gpu_operator.agents.gfd.program",
    "exporter": "gpu_operator.agents.exporter.program",
    "validator": "gpu_operator.agents.validator.program",
    "node-status-exporter": "gpu_operator.agents.nodestatus.program",
    "toolkit": "gpu_operator.agents.toolkit.program",
    "mig-manager": "gpu_operator.agents.migmanager.program",
    "driver-manager": "gpu_operator.agents.drivermanager.manager",
    "driver": "gpu_operator.agents.drivermanager.driver",
    "nvidia-peermem": "gpu_operator.agents.drivermanager.peermem",
    "gpu-discovery": "gpu_operator.agents.discovery.program",
    "mps-control-daemon": "gpu_operator.agents.mps.program",
    "multus": "gpu_operator.agents.multus.program",
    "rdma-shared-dp": "gpu_operator.agents.rdmadp.program",
    "sriov-dp": "gpu_operator.agents.sriovdp.program",
    "nic-feature-discovery": "gpu_operator.agents.nicfd.program",
    "ofed-driver": "gpu_operator.agents.ofed.program",
    "ofed-safe-load": "gpu_operator.agents.ofed.safeload",
}


class _Programs(Mapping[str, Program]):
    """The read-only table of programs; a program's module is imported on its first lookup."""

    def __getitem__(self, name: str) -> Program:
        module = MODULES[name]
        if not module:
            return sleep_program
        program: Program = importlib.import_module(module).main
        return program

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)


PROGRAMS: Mapping[str, Program] = _Programs()
