"""Stand-ins for NVIDIA's operand images on simulated nodes.

NVIDIA's images (driver, toolkit, device plugin, validator, ...) cannot be pulled here, so a simulated
container that runs NVIDIA's contract (``render.nvidia``: NVIDIA's command, no ``gpu-operator
agent``) is run by a stand-in: the agent of ours that does the same job, given the contract's
environment, plus what NVIDIA's entrypoints add. The stand-ins honour the contract's files, so the
chain is tested across the two implementations:

- the driver container installs the simulated driver and writes ``.driver-ctr-ready`` (what NVIDIA's
  startup-probe script writes), its version read from the image tag (``595.91.07-ubuntu22.04``);
- operands whose NVIDIA entrypoint waits for ``driver-ready`` and sources it (toolkit, device plugin,
  MIG manager) wait for the file and take its variables;
- NVIDIA's ``toolkit-validation`` wait loop waits for ``toolkit-ready`` and exits;
- ``nvidia-peermem-ctr`` (``reload_nvidia_peermem``) is our peermem agent: it waits for MOFED's
  ``.driver-ready`` (or the host's mlx5_core) and ``.driver-ctr-ready``, then loads the module;
- containers whose program has no agent of ours (DCGM host engine, the config managers, the
  GDS and GDRCopy side-cars) run until stopped; those with a probe report ready, as the probe would.

A stand-in is chosen by container name, the contract's fixed names; what it cannot stand in for is
left to the ``UnknownProgram`` wait, never guessed. The network operator's containers (OFED driver,
RDMA and SR-IOV device plugins, Multus, ...) have stand-ins of their own, in ``netstandins``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.agents.shared.shellquote import parse_assignments
from gpu_operator.names.images import tag_version
from gpu_operator.sim.programs.context import ProgramContext
from gpu_operator.sim.programs.netstandins import NETWORK_STANDINS
from gpu_operator.sim.programs.programs import Program

VALIDATIONS = "/run/nvidia/validations"
POLL_SECONDS = 0.2
#: Variables of NVIDIA's toolkit that are paths inside its container (``/runtime/...``): our toolkit
#: agent writes the host's runtime files at their host paths, so it gets none of them.
CONTAINER_PATH_VARS = (
    "RUNTIME_CONFIG",
    "CONTAINERD_CONFIG",
    "CRIO_CONFIG",
    "DOCKER_CONFIG",
    "RUNTIME_SOCKET",
    "CONTAINERD_SOCKET",
    "DOCKER_SOCKET",
    "RUNTIME_DROP_IN_CONFIG",
    "NRI_SOCKET",
)


@dataclass(frozen=True, kw_only=True)
class StandIn:
    agent: str | None  # our agent; None: run until stopped
    sources_driver_ready: bool = False
    drop: Sequence[str] = ()
    ready: bool = False  # for agent None: report ready (a probe the real program would pass)
    exits: bool = False  # for agent None: exit 0 at once (a one-shot init container)
    version_from_image: bool = False


STANDINS: Mapping[str, StandIn] = {
    "nvidia-driver-ctr": StandIn(agent="driver", version_from_image=True),
    "k8s-driver-manager": StandIn(agent="driver-manager"),
    "driver-validation": StandIn(agent="validator"),
    "cuda-validation": StandIn(agent="validator"),
    "plugin-validation": StandIn(agent="validator"),
    "nvidia-operator-validator": StandIn(agent=None),
    "nvidia-container-toolkit-ctr": StandIn(agent="toolkit", sources_driver_ready=True, drop=CONTAINER_PATH_VARS),
    "nvidia-device-plugin": StandIn(agent="device-plugin", sources_driver_ready=True),
    "mps-control-daemon-ctr": StandIn(agent="mps-control-daemon"),
    "mps-control-daemon-mounts": StandIn(agent=None, exits=True),
    "gpu-feature-discovery": StandIn(agent="feature-discovery"),
    "nvidia-dcgm-exporter": StandIn(agent="exporter"),
    "nvidia-dcgm-ctr": StandIn(agent=None, ready=True),
    "nvidia-mig-manager": StandIn(agent="mig-manager", sources_driver_ready=True),
    "nvidia-node-status-exporter": StandIn(agent="node-status-exporter"),
    "config-manager-init": StandIn(agent=None, exits=True),
    "config-manager": StandIn(agent=None),
    "nvidia-peermem-ctr": StandIn(agent="nvidia-peermem"),
    "nvidia-fs-ctr": StandIn(agent=None, ready=True),
    "nvidia-gdrcopy-ctr": StandIn(agent=None, ready=True),
}
PROGRAM_PREFIX = "nvidia-standin-"


def standin_name(*, container: str, command: Sequence[str], args: Sequence[str]) -> str | None:
    """The stand-in program for a container of NVIDIA's contract, or None."""
    if container == "toolkit-validation":
        # Two contracts share the name: the validator DaemonSet's check, and every operand's wait loop.
        waits = any("toolkit-ready" in a for a in args)
        return f"{PROGRAM_PREFIX}toolkit-wait" if waits else f"{PROGRAM_PREFIX}toolkit-validation"
    return f"{PROGRAM_PREFIX}{container}" if container in STANDINS or container in NETWORK_STANDINS else None


def _driver_ready(text: str) -> dict[str, str]:
    # The file is sourced by a shell in the real entrypoints: read its quoted values as sh would.
    return parse_assignments(text, field="driver-ready")


async def _wait_file(ctx: ProgramContext, name: str) -> bool:
    """True once the validations file exists; False when the container is stopped first."""
    path = ctx.host_path(f"{VALIDATIONS}/{name}")
    while not path.exists():
        if await ctx.sleep(POLL_SECONDS):
            return False
    return True


def _program(standin: StandIn) -> Program:
    async def run(ctx: ProgramContext) -> None:
        if standin.agent is None:
            if standin.exits:
                return
            if standin.ready:
                ctx.set_ready(True)
            await ctx.stopped()
            return
        env = {k: v for k, v in ctx.env.items() if k not in standin.drop}
        if standin.sources_driver_ready:
            if not await _wait_file(ctx, "driver-ready"):
                return
            env.update(_driver_ready(ctx.host_path(f"{VALIDATIONS}/driver-ready").read_text()))
        if standin.version_from_image and not env.get("DRIVER_VERSION"):
            version = tag_version(ctx.argv[0]) if ctx.argv else ""  # the runtime passes the image
            if version:
                env["DRIVER_VERSION"] = version
        inner = replace(ctx, env=env, program=standin.agent)
        entry = PROGRAMS[standin.agent]
        if inspect.iscoroutinefunction(entry):
            await entry(inner)
        else:
            await asyncio.to_thread(entry, inner)

    return run


async def _toolkit_wait(ctx: ProgramContext) -> None:
    await _wait_file(ctx, "toolkit-ready")


def programs() -> dict[str, Program]:
    """Every stand-in program by its registry name (each run gets its container's image as argv[0])."""
    out = {f"{PROGRAM_PREFIX}{name}": _program(s) for name, s in STANDINS.items()}
    out[f"{PROGRAM_PREFIX}toolkit-validation"] = _program(StandIn(agent="validator"))
    out[f"{PROGRAM_PREFIX}toolkit-wait"] = _toolkit_wait
    out.update({f"{PROGRAM_PREFIX}{name}": program for name, program in NETWORK_STANDINS.items()})
    return out
