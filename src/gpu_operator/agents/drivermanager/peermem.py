"""``gpu-operator agent nvidia-peermem``: the driver pod's GPUDirect RDMA side-car (``nvidia-peermem-ctr``).

``nvidia-peermem`` joins the NVIDIA driver to the Mellanox RDMA stack, so it can only load once both
are there: loaded earlier it would bind to whatever RDMA core the kernel has, and block the MOFED
container from replacing it. The wait is on files, as NVIDIA's ``reload_nvidia_peermem`` waits, never on
node labels:

- MOFED from the Network Operator (the default): its container writes ``/run/mellanox/drivers/.driver-ready``
  (``names.network.DRIVER_READY``, a hostPath shared with this container);
- ``USE_HOST_MOFED=true``: the host's own MOFED, seen as ``mlx5_core`` in the host's sysfs
  (``/sys/module/mlx5_core``, what ``lsmod`` lists; read through the host root, as the driver agent reads it);
- and in both cases the driver container's ``/run/nvidia/validations/.driver-ctr-ready``.

Then the module is loaded through the driver host the driver agent uses (``steps.driver_host``):
``modprobe`` inside the driver's exposed root ``/run/nvidia/driver`` on a real node (this container's own
root has no NVIDIA modules), the simulated kernel on a simulated node. The agent keeps running and checks
again every ``PEERMEM_POLL_SECONDS`` (2): a MOFED reload or a driver restart unloads the module, and it
is loaded again once both sides are back (NVIDIA's side-car gets the same by a liveness probe restarting
it). It never unloads the module itself: the driver container's unload takes it first (``UNLOAD_ORDER``),
and MOFED's own unload takes it when MOFED goes.

Readiness follows NVIDIA's probe: ready while the module is loaded, or while the node has no RDMA stack
at all (``mlx5_core`` not loaded: nothing to join, and a GPU node without NICs must not hold its driver
pod back); not ready while the stack is there without the module.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from gpu_operator.agents.drivermanager.driver import CTR_READY
from gpu_operator.agents.drivermanager.modules import DriverHost
from gpu_operator.agents.drivermanager.steps import DRIVER_ROOT, driver_host
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.api.envtext import env_duration, env_flag
from gpu_operator.names.network import DRIVER_READY
from gpu_operator.runtime.loop import LoopStats
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
MODULE = "nvidia-peermem"
LOADED_NAME = "nvidia_peermem"  # its /sys/module name
MLX5_CORE = "/sys/module/mlx5_core"
DEFAULT_POLL_SECONDS = 2.0


def poll_seconds(raw: str | None) -> float:
    """``PEERMEM_POLL_SECONDS``: how often the prerequisites and the module are checked (100ms to 1h)."""
    value = env_duration(
        {"PEERMEM_POLL_SECONDS": raw or ""},
        "PEERMEM_POLL_SECONDS",
        default=DEFAULT_POLL_SECONDS,
        minimum=0.1,
        maximum=3600.0,
    )
    return DEFAULT_POLL_SECONDS if value is None else value


@dataclass(frozen=True, kw_only=True)
class Observation:
    """What one check of the node saw."""

    mofed_ready: bool  # the MOFED side this container waits for (the container's file, or the host's module)
    driver_ready: bool  # the driver container's .driver-ctr-ready
    rdma_stack: bool  # mlx5_core is loaded on the host (by MOFED or the host)
    loaded: bool  # nvidia_peermem is loaded

    @property
    def prerequisites(self) -> bool:
        return self.mofed_ready and self.driver_ready

    @property
    def ready(self) -> bool:
        return self.loaded or not self.rdma_stack

    def waiting_for(self, *, host_mofed: bool) -> str:
        missing = []
        if not self.mofed_ready:
            missing.append(f"the host's mlx5_core ({MLX5_CORE})" if host_mofed else f"MOFED ({DRIVER_READY})")
        if not self.driver_ready:
            missing.append(f"the NVIDIA driver ({CTR_READY})")
        return " and ".join(missing)


class PeerMemory:
    """The side-car's checks and the module load on one node (synchronous: run it in a thread)."""

    def __init__(self, *, ctx: AgentContext, host: DriverHost) -> None:
        self.ctx, self.host = ctx, host
        self.host_mofed = env_flag(ctx.env, "USE_HOST_MOFED", default=False)
        self.name = f"nvidia-peermem[{ctx.node_name}]"

    def observe(self) -> Observation:
        stack = self.ctx.host_path(MLX5_CORE).is_dir()
        return Observation(
            mofed_ready=stack if self.host_mofed else self.ctx.path(DRIVER_READY).is_file(),
            driver_ready=self.ctx.path(CTR_READY).is_file(),
            rdma_stack=stack,
            loaded=LOADED_NAME in self.host.loaded(),
        )

    def check(self) -> Observation:
        """Observe, and load the module when both sides are ready and it is not loaded (ModuleError)."""
        seen = self.observe()
        if seen.prerequisites and not seen.loaded:
            self.host.load(MODULE)
            seen = self.observe()
            if not seen.loaded:
                raise RuntimeError(f"{MODULE} was loaded but {LOADED_NAME} is not in the host's sysfs")
            log.info("%s: %s loaded (MOFED and the NVIDIA driver are ready)", self.name, MODULE)
        return seen


async def main(ctx: AgentContext) -> None:
    await run(ctx)


async def run(ctx: AgentContext) -> LoopStats:
    """Wait for MOFED and the driver, load nvidia-peermem, and keep it loaded until stopped."""
    interval = poll_seconds(ctx.env.get("PEERMEM_POLL_SECONDS"))
    side_car = PeerMemory(ctx=ctx, host=driver_host(ctx, modprobe_root=DRIVER_ROOT))
    said: list[str] = [""]  # the last waiting message, so that a long wait logs once, not every poll

    async def round_() -> None:
        try:
            seen = await asyncio.to_thread(side_car.check)
        except Exception:
            ctx.set_ready(False)
            raise  # every() logs it and tries again after its backoff
        ctx.set_ready(seen.ready)
        waiting = "" if seen.loaded else seen.waiting_for(host_mofed=side_car.host_mofed)
        if waiting and waiting != said[0]:
            log.info("%s: waiting for %s before loading %s", side_car.name, waiting, MODULE)
        said[0] = waiting

    try:
        return await every(name=side_car.name, seconds=interval, work=round_, sleep=ctx.sleep)
    finally:
        ctx.set_ready(False)
