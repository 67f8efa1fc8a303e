"""Program runs (async and threaded) and the outcomes a container runtime would report; the context's
path mapping and stop/crash signalling. No sleeping: programs wait on the context's stop signal."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.gpu.null import NullBackend
from gpu_operator.sim.programs.context import InjectedCrashError, ProgramContext, ProgramExit, Signals
from gpu_operator.sim.programs.launcher import KILLED_EXIT_CODE, Outcome, ProgramRun
from gpu_operator.sim.programs.programs import Program, ProgramRegistry, default_registry


def _context(tmp_path: Path, **overrides: Any) -> ProgramContext:
    values: dict[str, Any] = {
        "node_name": "n",
        "namespace": "ns",
        "pod_name": "p",
        "pod_uid": "u",
        "container_name": "c",
        "program": "x",
        "argv": (),
        "env": {},
        "host_root": tmp_path / "host",
        "plugin_dir": tmp_path / "dp",
        "pod_resources_socket": tmp_path / "pr.sock",
        "gpu": NullBackend(),
        "rootfs": tmp_path / "rootfs",
    }
    values.update(overrides)
    return ProgramContext(**values)


def test_path_follows_the_longest_mount(tmp_path: Path) -> None:
    ctx = _context(tmp_path, mounts={"/etc": tmp_path / "etc", "/etc/agent": tmp_path / "cfg"})
    assert ctx.path("/etc/agent/config.yaml") == tmp_path / "cfg" / "config.yaml"
    assert ctx.path("/etc/hosts") == tmp_path / "etc" / "hosts"
    assert ctx.path("/etc/agent") == tmp_path / "cfg"
    assert ctx.path("/tmp/x") == tmp_path / "rootfs" / "tmp" / "x"
    assert ctx.host_path("/run/nvidia") == tmp_path / "host" / "run" / "nvidia"


def _run(tmp_path: Path, program: Program, *, argv: tuple[str, ...] = (), act: str = "") -> tuple[Outcome, list[bool]]:
    """Start ``program``; ``act`` = stop | crash | kill once it is running; return its outcome and readiness calls."""
    readiness: list[bool] = []

    async def scenario() -> Outcome:
        registry = ProgramRegistry()
        registry.register_program("x", program)
        spec = registry.get("x")
        assert spec is not None
        signals = Signals(loop=asyncio.get_running_loop(), on_ready=readiness.append)
        run = ProgramRun(spec=spec, ctx=_context(tmp_path, argv=argv, signals=signals), signals=signals, label="t")
        await asyncio.sleep(0)  # let an async program reach its first await
        if act == "stop":
            run.stop()
        elif act == "crash":
            run.crash("injected")
        elif act == "kill":
            run.kill()
        return await run.outcome()

    return asyncio.run(scenario()), readiness


async def _until_stopped(ctx: ProgramContext) -> None:
    ctx.set_ready()
    await ctx.stopped()


async def _stubborn(ctx: ProgramContext) -> None:
    await asyncio.Event().wait()  # never returns on its own


async def _exit_3(ctx: ProgramContext) -> None:
    raise ProgramExit(3, "three")


async def _broken(ctx: ProgramContext) -> None:
    raise RuntimeError("boom")


def test_async_program_stops_cleanly(tmp_path: Path) -> None:
    outcome, readiness = _run(tmp_path, _until_stopped, act="stop")
    assert outcome == Outcome(exit_code=0, reason="Completed")
    assert readiness == [True]


def test_async_program_crash_and_kill(tmp_path: Path) -> None:
    assert _run(tmp_path, _until_stopped, act="crash")[0] == Outcome(exit_code=1, reason="Error", message="injected")
    assert _run(tmp_path, _stubborn, act="crash")[0].message == "injected"
    assert _run(tmp_path, _stubborn, act="kill")[0].exit_code == KILLED_EXIT_CODE


def test_exit_codes_and_errors(tmp_path: Path) -> None:
    assert _run(tmp_path, _exit_3)[0] == Outcome(exit_code=3, reason="Error", message="three")
    assert _run(tmp_path, _broken)[0] == Outcome(exit_code=1, reason="Error", message="RuntimeError: boom")
    fail = default_registry().get("fail")
    assert fail is not None
    assert _run(tmp_path, fail.entrypoint, argv=("4",))[0].exit_code == 4
    sleep = default_registry().get("sleep")
    assert sleep is not None
    assert _run(tmp_path, sleep.entrypoint, argv=("0",))[0] == Outcome(exit_code=0, reason="Completed")


def test_thread_program_sees_stop_and_crash(tmp_path: Path) -> None:
    started = threading.Event()

    def waits(ctx: ProgramContext) -> None:
        ctx.set_ready(True)
        started.set()
        while not ctx.wait(None):
            pass

    outcome, readiness = _run(tmp_path, waits, act="stop")
    assert outcome.exit_code == 0
    assert readiness == [True]  # delivered in the loop thread
    outcome, _ = _run(tmp_path, waits, act="crash")
    assert (outcome.exit_code, outcome.message) == (1, "injected")


def test_signals_raise_injected_crash(tmp_path: Path) -> None:
    async def scenario() -> None:
        signals = Signals(loop=asyncio.get_running_loop(), on_ready=lambda _: None)
        assert not await signals.wait_async(0)
        signals.crash("x")
        with pytest.raises(InjectedCrashError, match="x"):
            await signals.wait_async(None)

    asyncio.run(scenario())
    ctx = _context(tmp_path)
    with pytest.raises(RuntimeError, match="not attached"):
        ctx.wait(0)
