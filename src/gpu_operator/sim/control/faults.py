"""Fault injection on simulated nodes (called through :class:`~gpu_operator.sim.control.simulator.Simulator` and the
``gpu-operator sim fault`` control channel).

GPU faults delegate to the node's simulated backend (which queues the health event agents see in
``wait_health_events``); the others act on the simulated kubelet: a kubelet restart (sockets removed,
Registration served anew, plugins must re-register), NotReady (Ready=False, or heartbeats stopped so the
node-lifecycle controller marks it unreachable), and a crash of a running program (restart count + 1, then
restarted per the restart policy). Driver faults are files in the node's host root that the driver's
program reads when it starts: a failing GPU driver install, a failing or hanging OFED driver load.
"""

from __future__ import annotations

from gpu_operator.agents.drivermanager.modules import FAIL_INSTALL_MARKER
from gpu_operator.gpu.backend import GpuError
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.sim.kubelet.node import SimNode
from gpu_operator.sim.programs.netstandins import FAULT_FILE, FAULT_MODES


class FaultError(RuntimeError):
    """A fault cannot be injected (unknown GPU, no such container, a node without GPUs)."""


def _backend(node: SimNode) -> SimulatedBackend:
    if not isinstance(node.gpu, SimulatedBackend):
        raise FaultError(f"node {node.name} ({node.profile.name}) has no simulated GPU")
    return node.gpu


async def inject_xid(node: SimNode, *, gpu: int, xid: int, gi_id: int | None = None) -> str:
    try:
        _backend(node).inject_xid(gpu, xid, gi_id=gi_id)
    except GpuError as error:
        raise FaultError(str(error)) from error
    await node.gpu_changed()
    return f"XID {xid} on {node.name} GPU {gpu}" + (f" (GPU instance {gi_id})" if gi_id is not None else "")


async def lose_gpu(node: SimNode, *, gpu: int) -> str:
    try:
        _backend(node).lose_gpu(gpu)
    except GpuError as error:
        raise FaultError(str(error)) from error
    await node.gpu_changed()
    return f"{node.name} GPU {gpu} fell off the bus"


async def recover_gpu(node: SimNode, *, gpu: int) -> str:
    try:
        _backend(node).recover_gpu(gpu)
    except GpuError as error:
        raise FaultError(str(error)) from error
    await node.gpu_changed()
    return f"{node.name} GPU {gpu} recovered"


async def restart_kubelet(node: SimNode) -> str:
    await node.restart_kubelet()
    return f"kubelet on {node.name} restarted (device-plugin sockets removed; plugins must re-register)"


async def fail_driver_install(node: SimNode, *, version: str = "", fail: bool = True) -> str:
    """Make the node's driver install fail (for ``version`` only, or any version), or heal it again."""
    marker = node.host_root / FAIL_INSTALL_MARKER
    if not fail:
        marker.unlink(missing_ok=True)
        return f"{node.name}: driver installs succeed again"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(version + "\n", encoding="utf-8")
    return f"{node.name}: installing driver {version or 'of any version'} fails"


OFED_CLEAR = "clear"


async def ofed_fault(node: SimNode, *, mode: str, image_contains: str = "") -> str:
    """Make the node's next OFED driver loads ``fail`` or ``hang`` (only for images containing ``image_contains``,
    when given), or ``clear`` the fault; a running OFED container is not affected (restart or crash it)."""
    marker = node.host_root / FAULT_FILE.lstrip("/")
    if mode == OFED_CLEAR:
        marker.unlink(missing_ok=True)
        return f"{node.name}: OFED driver loads succeed again"
    if mode not in FAULT_MODES:
        raise FaultError(f"unknown OFED fault {mode!r}; known: {', '.join((*FAULT_MODES, OFED_CLEAR))}")
    if node.shape.nic_count == 0:
        raise FaultError(f"node {node.name} has no Mellanox NIC")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{mode} {image_contains}".strip() + "\n", encoding="utf-8")
    which = f"of images containing {image_contains!r}" if image_contains else "of any image"
    return f"{node.name}: OFED driver loads {which} {'fail' if mode == 'fail' else 'hang'}"


async def set_ready(node: SimNode, *, ready: bool, heartbeats: bool = True) -> str:
    await node.set_ready(ready, heartbeats=heartbeats)
    if not heartbeats:
        return f"{node.name}: heartbeats stopped (the node-lifecycle controller will mark it unreachable)"
    return f"{node.name}: Ready={ready}"


async def crash(
    node: SimNode,
    *,
    namespace: str | None = None,
    pod: str | None = None,
    container: str | None = None,
    program: str | None = None,
) -> str:
    """Crash the first running container matching every given filter."""
    for worker in node.workers.values():
        if (namespace and worker.namespace != namespace) or (pod and worker.name != pod):
            continue
        for name, run in worker.runs.items():
            if run.done or (container and name != container) or (program and run.spec.name != program):
                continue
            run.crash("crash injected by the simulator")
            return f"crashed {worker.namespace}/{worker.name} container {name} (program {run.spec.name}) on {node.name}"
    wanted = ", ".join(
        f"{k}={v}"
        for k, v in {"namespace": namespace, "pod": pod, "container": container, "program": program}.items()
        if v
    )
    raise FaultError(f"no running container on {node.name} matches {wanted or 'anything'}")
