"""The ``ofed-driver`` agent: upstream's order (storage modules, in-tree unload dependants first, load),
``.driver-ready`` written last and removed first, the host's driver restored on stop, the simulator's
fault file, the backends. No sleeping: the context's ``sleep`` is the test's step function."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.ofed import modules, program
from gpu_operator.agents.ofed.modules import (
    LOAD_MODULES,
    UNLOAD_ORDER,
    HostOfed,
    NullOfed,
    SimulatedOfed,
)
from gpu_operator.agents.ofed.program import Ofed, OfedError, open_host
from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.gpu.null import NullBackend
from gpu_operator.names.network import DRIVER_READY
from gpu_operator.sim.programs import netstandins
from tests.unit.fake_context import FakeContext


@dataclass
class Ctx(FakeContext):
    """Records every readiness report; ``crash_at``: the sleep call that raises (an injected crash)."""

    seen: list[bool] = field(default_factory=list)
    crash_at: int = 0
    sleeps: int = 0

    def set_ready(self, ready: bool = True) -> None:
        self.seen.append(ready)
        super().set_ready(ready)

    async def sleep(self, seconds: float | None) -> bool:
        self.sleeps += 1
        if self.crash_at and self.sleeps >= self.crash_at:
            raise RuntimeError("injected crash")
        return await super().sleep(seconds)


def _ctx(tmp_path: Path, *, stop_after: int = 2, **env: str) -> Ctx:
    return Ctx(root=tmp_path, gpu=NullBackend(reason="no GPU"), env=dict(env), stop_after=stop_after)


class Recording(SimulatedOfed):
    """A simulated host that records each call and whether ``.driver-ready`` existed at that moment."""

    def __init__(self, ctx: FakeContext, **kwargs: str) -> None:
        super().__init__(host_root=ctx.host_path("/"), **kwargs)
        self.ready_file = ctx.path(DRIVER_READY)
        self.calls: list[tuple[str, str, bool]] = []

    def _note(self, op: str, module: str = "") -> None:
        self.calls.append((op, module, self.ready_file.exists()))

    def unload(self, module: str) -> None:
        self._note("unload", module)
        super().unload(module)

    def load(self, module: str) -> None:
        self._note("load", module)
        super().load(module)

    def expose_root(self, drivers: Path) -> None:
        self._note("expose")
        super().expose_root(drivers)


def _preload(ctx: FakeContext, *names: str) -> None:
    for name in names:
        path = ctx.host_path(f"/sys/module/{name}")
        path.mkdir(parents=True, exist_ok=True)
        (path / "refcnt").write_text("0\n", encoding="utf-8")


def _run(ctx: FakeContext, host: modules.OfedHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(program, "open_host", lambda _ctx: host)
    asyncio.run(program.main(ctx))


def test_in_tree_modules_go_dependants_first_then_the_driver_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = _ctx(tmp_path)
    _preload(ctx, "ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs", "nvidia_peermem")
    host = Recording(ctx)
    _run(ctx, host, monkeypatch)
    unloads = [m for op, m, _ in host.calls if op == "unload"]
    assert unloads[:5] == ["nvidia_peermem", "mlx5_ib", "ib_uverbs", "mlx5_core", "ib_core"]
    assert [m for op, m, _ in host.calls if op == "load"] == list(LOAD_MODULES)
    first_load = next(i for i, (op, _, _) in enumerate(host.calls) if op == "load")
    assert all(op == "unload" for op, _, _ in host.calls[:first_load])


def test_driver_ready_is_written_last_and_removed_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, NVIDIA_NIC_DRIVER_VER="25.04-0.6.1.0-2")
    host = Recording(ctx)
    _run(ctx, host, monkeypatch)
    # Nothing happened while the file existed, except the stop's unloads, which come after its removal.
    assert not any(present for _, _, present in host.calls)
    assert ("expose", "", False) in host.calls
    assert not ctx.path(DRIVER_READY).exists()
    assert not ctx.host_path("/sys/module/mlx5_core").exists()  # RESTORE_DRIVER_ON_POD_TERMINATION defaults true
    assert not ctx.path("/run/mellanox/drivers/usr").exists()
    assert ctx.ready is False


def test_while_running_the_driver_is_loaded_exported_and_ready(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, NVIDIA_NIC_DRIVER_VER="25.04")
    host = SimulatedOfed(host_root=ctx.host_path("/"), version="25.04")
    ofed = Ofed(ctx=ctx, host=host)
    ofed.clear_ready()
    assert ofed.prepare() is True
    ofed.load()
    ofed.publish()
    assert ctx.path(DRIVER_READY).read_text(encoding="utf-8") == "25.04\n"
    assert ctx.path("/run/mellanox/drivers/usr/src/ofa_kernel/default").is_dir()
    assert {"mlx_compat", "ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs", "rdma_cm"} <= set(host.loaded())


def test_restore_false_leaves_the_driver_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, RESTORE_DRIVER_ON_POD_TERMINATION="false")
    _run(ctx, SimulatedOfed(host_root=ctx.host_path("/")), monkeypatch)
    assert not ctx.path(DRIVER_READY).exists()
    assert ctx.host_path("/sys/module/mlx5_core/refcnt").exists()


def test_restore_loads_back_the_hosts_own_modules(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _preload(ctx, "mlx5_core", "mlx5_ib", "ib_core")
    restored: list[str] = []

    class Host(SimulatedOfed):
        def restore(self, modules: Sequence[str]) -> None:
            restored.extend(modules)

    ofed = Ofed(ctx=ctx, host=Host(host_root=ctx.host_path("/")))
    ofed.clear_ready()
    ofed.prepare()
    ofed.load()
    ofed.publish()
    ofed.stop()
    assert restored == ["mlx5_core", "mlx5_ib"]
    assert not ctx.host_path("/sys/module/mlx5_core").exists()


def test_a_failed_load_brings_the_hosts_own_driver_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A swap that unloaded the inbox mlx5 stack and then failed must not leave the node without a NIC
    driver (the management port may run on it: upstream's #2176)."""
    ctx = _ctx(tmp_path)
    _preload(ctx, "mlx5_core", "mlx5_ib", "ib_core")
    restored: list[str] = []

    class Host(SimulatedOfed):
        def load(self, module: str) -> None:
            if module == "mlx5_ib":
                raise modules.ModuleError(f"modprobe {module}: Unknown symbol in module")
            super().load(module)

        def restore(self, names: Sequence[str]) -> None:
            restored.extend(names)
            super().restore(names)

    with pytest.raises(OfedError, match="Unknown symbol"):
        _run(ctx, Host(host_root=ctx.host_path("/")), monkeypatch)
    assert restored == ["mlx5_core", "mlx5_ib"]  # what the host had loaded before the swap
    assert not ctx.path(DRIVER_READY).exists()
    assert ctx.ready is False


def test_storage_modules_block_the_swap_unless_asked_to_unload(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _preload(ctx, "nvme_rdma", "mlx5_core", "ib_core")
    with pytest.raises(OfedError, match=r"nvme_rdma.*UNLOAD_STORAGE_MODULES=true"):
        Ofed(ctx=ctx, host=SimulatedOfed(host_root=ctx.host_path("/"))).prepare()
    ctx.env["UNLOAD_STORAGE_MODULES"] = "true"
    host = Recording(ctx)
    Ofed(ctx=ctx, host=host).prepare()
    assert [m for op, m, _ in host.calls][:1] == ["nvme_rdma"]
    assert host.loaded() == []


def test_a_busy_module_is_not_unloaded(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _preload(ctx, "mlx5_core")
    ctx.host_path("/sys/module/mlx5_core/refcnt").write_text("2\n", encoding="utf-8")
    with pytest.raises(OfedError, match="cannot unload mlx5_core: held by 2"):
        Ofed(ctx=ctx, host=SimulatedOfed(host_root=ctx.host_path("/"))).prepare()


def test_the_same_build_loaded_already_is_kept(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    _preload(ctx, "mlx5_core")
    ctx.host_path("/sys/module/mlx5_core/srcversion").write_text("ABC\n", encoding="utf-8")

    class Same(Recording):
        def target_srcversion(self, module: str) -> str:
            return "ABC"

    host = Same(ctx)
    ofed = Ofed(ctx=ctx, host=host)
    assert ofed.prepare() is False
    assert host.calls == []
    ofed.publish()
    ofed.stop()  # nothing was swapped: nothing to restore
    assert host.calls == [("expose", "", False)]
    assert ctx.host_path("/sys/module/mlx5_core/refcnt").exists()


def _fault(ctx: FakeContext, text: str) -> None:
    path = ctx.host_path(netstandins.FAULT_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_a_fail_fault_fails_the_load_after_the_delay(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, OFED_BACKEND="simulated", NVIDIA_NIC_DRIVER_VER="25.04-0.6.1.0-2")
    _fault(ctx, "fail 25.04")
    with pytest.raises(OfedError, match="failed"):
        asyncio.run(program.main(ctx))
    assert not ctx.path(DRIVER_READY).exists()
    assert ctx.ready is False


def test_a_fault_for_another_version_does_not_apply(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, OFED_BACKEND="simulated", NVIDIA_NIC_DRIVER_VER="24.10-0.7.0.0-0")
    _fault(ctx, "fail 25.04")
    asyncio.run(program.main(ctx))
    assert ctx.seen == [True, False]


def test_a_hang_fault_never_loads_and_stops_cleanly(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, OFED_BACKEND="simulated")
    _fault(ctx, "hang")
    asyncio.run(program.main(ctx))
    assert True not in ctx.seen
    assert not ctx.host_path("/sys/module/mlx5_core").exists()


def test_load_seconds_come_from_the_file(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    host = SimulatedOfed(host_root=ctx.host_path("/"))
    assert host.fault() == ("", modules.SIM_LOAD_SECONDS)
    path = ctx.host_path(netstandins.LOAD_SECONDS_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("3", encoding="utf-8")
    assert host.fault() == ("", 3.0)


def test_a_crash_unloads_nothing(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, OFED_BACKEND="simulated")
    ctx.crash_at = 2  # the first sleep is the load delay; the crash comes while holding
    with pytest.raises(RuntimeError, match="injected crash"):
        asyncio.run(program.main(ctx))
    assert ctx.path(DRIVER_READY).exists()
    assert ctx.host_path("/sys/module/mlx5_core/refcnt").exists()


def test_the_null_backend_loads_nothing_and_reports_ready(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, OFED_BACKEND="null")
    assert isinstance(open_host(ctx), NullOfed)
    asyncio.run(program.main(ctx))
    assert ctx.seen == [True, False]
    assert not ctx.host_path("/sys/module").exists()


def test_backend_choice(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert isinstance(open_host(ctx), SimulatedOfed)
    ctx.host_path("/sys/kernel").mkdir(parents=True)
    assert isinstance(open_host(ctx), HostOfed)
    ctx.env["OFED_BACKEND"] = "simulated"
    assert isinstance(open_host(ctx), SimulatedOfed)
    ctx.env["OFED_BACKEND"] = "magic"
    with pytest.raises(OfedError, match="OFED_BACKEND: 'magic'"):
        open_host(ctx)


def test_the_real_host_runs_rmmod_and_modprobe_from_the_host_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def run(command: list[str], *, timeout: float) -> str:
        commands.append(list(command))
        return "XYZ\n"

    monkeypatch.setattr(modules, "_run", run)
    host = HostOfed(sys_root=tmp_path / "sys", host_root=tmp_path)
    host.unload("mlx5_ib")
    host.load("mlx5_core")
    assert host.target_srcversion("mlx5_core") == "XYZ"
    host.expose_root(tmp_path / "drivers")  # no ofa_kernel on the host: nothing to bind
    assert commands == [
        ["rmmod", "mlx5_ib"],
        ["modprobe", "-d", str(tmp_path), "mlx5_core"],
        ["modinfo", "-b", str(tmp_path), "-F", "srcversion", "mlx5_core"],
    ]
    (tmp_path / "usr/src/ofa_kernel").mkdir(parents=True)
    host.expose_root(tmp_path / "drivers")
    assert commands[-1] == [
        "mount",
        "--rbind",
        "-o",
        "ro",
        str(tmp_path / "usr/src"),
        str(tmp_path / "drivers/usr/src"),
    ]


def test_the_simulators_fault_files_are_the_stand_ins() -> None:
    assert modules.FAULT_FILE == netstandins.FAULT_FILE
    assert modules.LOAD_SECONDS_FILE == netstandins.LOAD_SECONDS_FILE
    assert modules.SIM_LOAD_SECONDS == netstandins.OFED_LOAD_SECONDS
    assert (modules.FAIL, modules.HANG) == netstandins.FAULT_MODES
    assert netstandins.EXPORTED_SOURCES.startswith(modules.EXPORTED_SOURCES)
    assert set(netstandins.MODULES) <= set(UNLOAD_ORDER)


def test_both_programs_are_registered() -> None:
    assert PROGRAMS["ofed-driver"] is program.main
    assert "ofed-safe-load" in PROGRAMS
