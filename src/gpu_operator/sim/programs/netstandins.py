"""Stand-ins for the network operator's operand containers on simulated NIC nodes.

The network operator deploys NVIDIA's and Mellanox's images (``doca-driver``, ``k8s-rdma-shared-dev-plugin``,
``multus-cni``, ...), which cannot be pulled here. On a simulated node the container is chosen by its
name (``names.network``'s container names, upstream's) and runs one of these programs instead; what
the operator and the other operands can observe of the real one is kept:

- ``mofed-container`` (the OFED driver) "loads" the driver: after a short delay it writes
  ``.driver-ready`` in its mount of ``/run/mellanox/drivers`` (the hostPath the renderer mounts with
  Bidirectional propagation, so the node sees it), marks ``mlx5_core`` and friends loaded under the
  node's ``sys/module`` (what ``lsmod | grep mlx5_core`` reads) and only then reports Ready, as its
  startup and readiness probes would. Asked to stop, it unloads: the file and the modules go. A crashed
  or killed container leaves them, as a dead process unloads nothing; the next start reloads.
- the RDMA shared and SR-IOV device plugins exit with an error when the node's ``.driver-ready`` is
  absent at start (no Mellanox RDMA devices without the driver), so a plugin pod started before OFED is
  not Ready and restarts with a back-off; otherwise they run until stopped.
- Multus, the CNI plugins, IPoIB CNI, ib-kubernetes, nv-ipam (node and controller), NIC feature
  discovery and DOCA telemetry run until stopped and report Ready (their agents come later);
  the OFED safe-load init container exits at once.

Faults, per node, in its host root (``Simulator.ofed_fault`` writes them): ``etc/simulated-ofed/fault``
holds ``fail`` (the load exits 1 after the delay) or ``hang`` (it never finishes loading, never Ready),
optionally followed by a text the container's image must contain (a version, to fail only an
upgrade); ``etc/simulated-ofed/load-seconds`` overrides the load delay (:data:`OFED_LOAD_SECONDS`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpu_operator.names import network
from gpu_operator.sim.programs.context import ProgramContext, ProgramExit
from gpu_operator.sim.programs.programs import Program

OFED_LOAD_SECONDS = 0.5
FAULT_FILE = "/etc/simulated-ofed/fault"
LOAD_SECONDS_FILE = "/etc/simulated-ofed/load-seconds"
FAIL, HANG = "fail", "hang"
FAULT_MODES = (FAIL, HANG)
READY_FILE = network.DRIVER_READY.rsplit("/", 1)[1]  # ".driver-ready", in the drivers directory
#: The Mellanox modules a loaded driver shows in ``/sys/module`` (``lsmod``), dependencies first.
MODULES = ("mlx_compat", "ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib")
#: What the container exports under its root for other modules to build against (GPUDirect's peermem).
EXPORTED_SOURCES = "usr/src/ofa_kernel/default"


def read_fault(path: Path, *, image: str) -> str:
    """The fault mode (``fail``, ``hang``) the file asks of a container running ``image``, or ""."""
    try:
        words = path.read_text(encoding="utf-8").split()
    except OSError:
        return ""
    if not words or words[0] not in FAULT_MODES:
        return ""
    wanted = " ".join(words[1:])
    return words[0] if not wanted or wanted in image else ""


def load_seconds(path: Path) -> float:
    """The load delay the file sets, else :data:`OFED_LOAD_SECONDS` (also for an unreadable value)."""
    try:
        return max(0.0, float(path.read_text(encoding="utf-8").strip()))
    except (OSError, ValueError):
        return OFED_LOAD_SECONDS


def _module(ctx: ProgramContext, name: str) -> Path:
    return ctx.host_path(f"/sys/module/{name}")


def loaded_modules(host_root: Path) -> list[str]:
    """The Mellanox modules loaded on a simulated node (``lsmod`` of :data:`MODULES`)."""
    return [m for m in MODULES if (host_root / "sys" / "module" / m / "refcnt").exists()]


def _load(ctx: ProgramContext, drivers: Path) -> None:
    for name in MODULES:
        module = _module(ctx, name)
        module.mkdir(parents=True, exist_ok=True)
        (module / "refcnt").write_text("0\n", encoding="utf-8")
    (drivers / EXPORTED_SOURCES).mkdir(parents=True, exist_ok=True)
    # Last: the startup probe (and everything waiting for the driver) takes the file as "loaded".
    (drivers / READY_FILE).touch()


def _unload(ctx: ProgramContext, drivers: Path) -> None:
    # First: nothing may take the driver as loaded while it goes.
    (drivers / READY_FILE).unlink(missing_ok=True)
    shutil.rmtree(drivers / "usr", ignore_errors=True)
    for name in reversed(MODULES):
        shutil.rmtree(_module(ctx, name), ignore_errors=True)


async def ofed_program(ctx: ProgramContext) -> None:
    """``mofed-container``: load, report Ready, unload when stopped (see the module docstring)."""
    image = ctx.argv[0] if ctx.argv else ""
    drivers = ctx.path(network.DRIVERS_DIR)  # the container's mount: the node's directory when mounted
    drivers.mkdir(parents=True, exist_ok=True)
    _unload(ctx, drivers)  # what an earlier container left (it crashed): the driver restarts from scratch
    fault = read_fault(ctx.host_path(FAULT_FILE), image=image)
    if await ctx.sleep(load_seconds(ctx.host_path(LOAD_SECONDS_FILE))):
        return
    if fault == FAIL:
        raise ProgramExit(1, f"loading the OFED driver of {image or 'this image'} failed (simulated fault)")
    if fault != HANG:
        _load(ctx, drivers)
        ctx.set_ready(True)
    await ctx.stopped()  # raises InjectedCrashError on a crash: a crashed container unloads nothing
    _unload(ctx, drivers)


async def needs_driver_program(ctx: ProgramContext) -> None:
    """The RDMA and SR-IOV device plugins: no devices (exit 1) without the node's OFED driver."""
    if not ctx.host_path(network.DRIVER_READY).exists():
        raise ProgramExit(
            1,
            f"{ctx.container_name}: no Mellanox RDMA devices on {ctx.node_name}: the OFED driver is not loaded "
            f"({network.DRIVER_READY} is missing)",
        )
    ctx.set_ready(True)
    await ctx.stopped()


async def until_stopped_program(ctx: ProgramContext) -> None:
    """An operand with no simulated behaviour yet: Ready while it runs."""
    ctx.set_ready(True)
    await ctx.stopped()


async def exits_program(ctx: ProgramContext) -> None:
    """A one-shot init container that has nothing to check on a simulated node."""


#: Container name -> its stand-in program.
NETWORK_STANDINS: dict[str, Program] = {
    network.OFED_CONTAINER: ofed_program,
    network.OFED_INIT_CONTAINER: exits_program,
    network.RDMA_DP_CONTAINER: needs_driver_program,
    network.SRIOV_DP_CONTAINER: needs_driver_program,
    **dict.fromkeys(
        (
            network.MULTUS_CONTAINER,
            network.CNI_PLUGINS_CONTAINER,
            network.IPOIB_CONTAINER,
            network.IB_KUBERNETES_CONTAINER,
            network.NV_IPAM_NODE_CONTAINER,
            network.NV_IPAM_CONTROLLER_CONTAINER,
            network.NIC_FD_CONTAINER,
            network.DOCA_TELEMETRY_CONTAINER,
        ),
        until_stopped_program,
    ),
}
