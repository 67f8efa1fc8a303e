"""The programs a simulated container can run, and how a container command names one.

The operator deploys its agents as ``gpu-operator agent NAME ARGS...`` (the command and args of our own
image), and the Helm charts run the operators themselves as ``gpu-operator operator ARGS...`` and
``gpu-operator network-operator ARGS...``. The simulator looks the program up in a :class:`ProgramRegistry`
(one per simulator, no module state) -- NAME for an agent, the verb for the other commands of our image
that a pod may run (:data:`PROGRAM_VERBS`) -- and runs the entrypoint in-process with a per-container
:class:`~gpu_operator.sim.programs.context.ProgramContext`:
coroutine functions as tasks in the simulator's event loop (preferred: they scale to thousands of nodes),
plain functions in a thread of their own. Anything else in a container command is not ours: the container
waits with reason ``UnknownProgram``.

Built-in programs for tests and demos: ``sleep [SECONDS]`` (runs until stopped, or exits 0 after SECONDS),
``fail [CODE]`` (exits at once with CODE, default 1) and ``ready-after SECONDS`` (Ready only after a delay,
for containers with a readiness probe).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpu_operator.sim.programs.context import ProgramContext, ProgramExit

Program = Callable[[ProgramContext], Awaitable[None] | None]
EXECUTABLE = "gpu-operator"
AGENT_VERB = "agent"
#: Commands of our image that run as a pod without an agent NAME: ``gpu-operator operator ARGS...`` runs the
#: program registered as ``operator`` (the Helm chart's Deployment; see ``gpu_operator.sim.programs.operatorpod``),
#: ``gpu-operator network-operator ARGS...`` the one registered as ``network-operator`` (the network chart's
#: Deployment; ``.netoperatorpod``), ``gpu-operator crds ARGS...`` the one registered as ``crds`` (the chart's
#: CRD hook Jobs; ``.crdhooks``).
PROGRAM_VERBS = frozenset({"operator", "network-operator", "crds"})


@dataclass(frozen=True, kw_only=True)
class ProgramSpec:
    name: str
    entrypoint: Program
    threaded: bool


def parse_command(*, command: Sequence[str], args: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """``(PROGRAM, ARGS)`` when the container runs ``[.../]gpu-operator agent NAME ARGS...`` (PROGRAM is NAME)
    or ``[.../]gpu-operator VERB ARGS...`` with VERB in :data:`PROGRAM_VERBS` (PROGRAM is VERB), else None."""
    argv = [*command, *args]
    if len(argv) < 2 or PurePosixPath(argv[0]).name != EXECUTABLE:
        return None
    if argv[1] == AGENT_VERB:
        return (argv[2], tuple(argv[3:])) if len(argv) >= 3 else None
    if argv[1] in PROGRAM_VERBS:
        return argv[1], tuple(argv[2:])
    return None


class ProgramRegistry:
    """Program name -> entrypoint."""

    def __init__(self, programs: Iterable[ProgramSpec] = ()) -> None:
        self._programs = {p.name: p for p in programs}

    def register_program(self, name: str, entrypoint: Program, *, threaded: bool | None = None) -> None:
        """Register (or replace) ``name``; ``threaded`` defaults to "not a coroutine function"."""
        if not name or "/" in name:
            raise ValueError(f"invalid program name {name!r}")
        run_in_thread = not inspect.iscoroutinefunction(entrypoint) if threaded is None else threaded
        self._programs[name] = ProgramSpec(name=name, entrypoint=entrypoint, threaded=run_in_thread)

    def unregister_program(self, name: str) -> None:
        self._programs.pop(name, None)

    def get(self, name: str) -> ProgramSpec | None:
        return self._programs.get(name)

    def names(self) -> list[str]:
        return sorted(self._programs)

    def copy(self) -> ProgramRegistry:
        return ProgramRegistry(self._programs.values())


async def sleep_program(ctx: ProgramContext) -> None:
    """Run until stopped, or for ``argv[0]`` seconds."""
    seconds = float(ctx.argv[0]) if ctx.argv else None
    await ctx.sleep(seconds)


async def fail_program(ctx: ProgramContext) -> None:
    """Exit at once with ``argv[0]`` (default 1)."""
    code = int(ctx.argv[0]) if ctx.argv else 1
    raise ProgramExit(code, f"fail program exited with {code}")


async def ready_after_program(ctx: ProgramContext) -> None:
    """Become Ready after ``argv[0]`` seconds, then run until stopped."""
    if await ctx.sleep(float(ctx.argv[0]) if ctx.argv else 0.0):
        return
    ctx.set_ready(True)
    await ctx.stopped()


def default_registry() -> ProgramRegistry:
    """A fresh registry holding the built-in programs."""
    registry = ProgramRegistry()
    registry.register_program("sleep", sleep_program)
    registry.register_program("fail", fail_program)
    registry.register_program("ready-after", ready_after_program)
    return registry
