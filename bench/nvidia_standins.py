"""Cheap stand-ins for NVIDIA's operand containers, for running NVIDIA's own operator on many simulated nodes.

The simulator runs a container of NVIDIA's contract through the program registered as
``nvidia-standin-<container>`` (``gpu_operator.sim.programs.standins``); by default those are our agents
doing the same job, far too heavy for hundreds of nodes. :func:`light_standins` replaces every one of them
with a program that only honours the contract's files under ``/run/nvidia/validations`` on the node's host
root, so the pods become Ready in the order NVIDIA's own containers would make them:

- ``nvidia-driver-ctr`` "loads the modules" (``/sys/module/nvidia`` on the host root), writes
  ``.driver-ctr-ready`` (what its startup probe checks) and is Ready; its preStop hook's removal of the file is
  done when it stops (the modules stay: the operands hold the devices, so the real one's unload fails);
- ``k8s-driver-manager`` (``uninstall_driver``) on a node with the modules loaded pauses the GPU operands
  (``nvidia.com/gpu.deploy.<operand>=paused-for-driver-upgrade``), waits for their pods to go, unloads and
  restores the labels: these Node label changes are what wakes NVIDIA's upgrade controller (it watches Node
  labels and otherwise only requeues every 2 minutes); on a fresh node it exits at once;
- ``nvidia-operator-validator`` is Ready and, as its preStop hook, removes every ``*-ready`` file;
- ``driver-validation`` (toolkit and validator DaemonSets) waits for ``.driver-ctr-ready`` and writes
  ``driver-ready``; the validator's ``toolkit-validation``, ``cuda-validation`` and ``plugin-validation``
  wait for the file before theirs and write ``toolkit-ready``, ``cuda-ready`` and ``plugin-ready``;
- the operands' ``toolkit-validation`` wait loop waits for ``toolkit-ready``;
- one-shot init containers (``config-manager-init``, ``mps-control-daemon-mounts``) exit 0; every other main
  container is Ready until stopped.

NVIDIA v25.3.4's DaemonSets (assets/state-*/*daemonset.yaml, with the chart's defaults: no GDS, GDRCopy,
RDMA, sandbox or vGPU) use no container name outside :data:`CONTRACT`; :func:`light_standins` covers every
stand-in name the simulator knows, so none of our agents runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_operator.agents.shared.operands import (
    DRIVER_OPERANDS,
    DRIVER_PAUSE,
    apps_for,
    pause_changes,
    restore_changes,
    wait_for_pods_gone,
)
from gpu_operator.sim.programs.context import ProgramContext
from gpu_operator.sim.programs.programs import Program
from gpu_operator.sim.programs.standins import PROGRAM_PREFIX, VALIDATIONS, _wait_file
from gpu_operator.sim.programs.standins import programs as heavy_standins

MODULE = "/sys/module/nvidia"  # on the node's host root: the driver is loaded
OPERANDS_GONE_TIMEOUT = 300.0
DRIVER_CTR_READY = ".driver-ctr-ready"
#: What ``driver-ready`` holds when the driver runs in a container (NVIDIA's validator writes it so).
DRIVER_READY_TEXT = "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nDRIVER_ROOT_CTR_PATH=/driver-root\n"
#: Validation init containers: (file waited for, file written).
CHECKS: Mapping[str, tuple[str, str]] = {
    "driver-validation": (DRIVER_CTR_READY, "driver-ready"),
    "toolkit-validation": ("driver-ready", "toolkit-ready"),
    "cuda-validation": ("toolkit-ready", "cuda-ready"),
    "plugin-validation": ("toolkit-ready", "plugin-ready"),
    "nvidia-fs-validation": ("driver-ready", "nvidia-fs-ready"),
}
ONE_SHOT = frozenset({"config-manager-init", "mps-control-daemon-mounts"})
#: Wait loops (init containers running ``until [ -f FILE ]``), by registry suffix.
WAITS: Mapping[str, str] = {"toolkit-wait": "toolkit-ready"}
#: Every container of NVIDIA's DaemonSets that the chart's default policy deploys (checked by the smoke run).
CONTRACT = frozenset({
    "k8s-driver-manager", "nvidia-driver-ctr", "driver-validation", "nvidia-container-toolkit-ctr",
    "toolkit-validation", "cuda-validation", "plugin-validation", "nvidia-operator-validator",
    "config-manager-init", "config-manager", "nvidia-device-plugin", "gpu-feature-discovery",
    "nvidia-dcgm-exporter", "nvidia-mig-manager", "mps-control-daemon-mounts", "mps-control-daemon-ctr",
})  # fmt: skip


def _write(ctx: ProgramContext, name: str, text: str = "") -> None:
    path = ctx.host_path(f"{VALIDATIONS}/{name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _check(waits_for: str, writes: str) -> Program:
    async def run(ctx: ProgramContext) -> None:
        if await _wait_file(ctx, waits_for):
            _write(ctx, writes, DRIVER_READY_TEXT if writes == "driver-ready" else "")

    return run


def _wait(name: str) -> Program:
    async def run(ctx: ProgramContext) -> None:
        await _wait_file(ctx, name)

    return run


async def _exit(ctx: ProgramContext) -> None:
    del ctx


async def _main(ctx: ProgramContext) -> None:
    ctx.set_ready(True)
    await ctx.stopped()


async def _validator(ctx: ProgramContext) -> None:
    ctx.set_ready(True)
    try:
        await ctx.stopped()
    finally:  # the DaemonSet's preStop hook: rm -f /run/nvidia/validations/*-ready
        for path in ctx.host_path(VALIDATIONS).glob("*-ready"):
            path.unlink(missing_ok=True)


async def _driver_manager(ctx: ProgramContext) -> None:
    module, cluster = ctx.host_path(MODULE), ctx.cluster
    if not module.exists() or cluster is None:
        return  # no driver loaded: nothing to unload, no operand to move
    changes = pause_changes((await cluster.node()).labels, operands=DRIVER_OPERANDS, reason=DRIVER_PAUSE)
    if changes:
        await cluster.patch_node(labels=changes)
    await wait_for_pods_gone(
        cluster, apps=apps_for(DRIVER_OPERANDS), timeout=OPERANDS_GONE_TIMEOUT, sleep=ctx.sleep, interval=0.5
    )
    module.rmdir()
    restore = restore_changes((await cluster.node()).labels, reason=DRIVER_PAUSE)
    if restore:
        await cluster.patch_node(labels=restore)


async def _driver(ctx: ProgramContext) -> None:
    ctx.host_path(MODULE).mkdir(parents=True, exist_ok=True)
    _write(ctx, DRIVER_CTR_READY)
    ctx.set_ready(True)
    try:
        await ctx.stopped()
    finally:  # the DaemonSet's preStop hook: rm -f /run/nvidia/validations/.driver-ctr-ready
        ctx.host_path(f"{VALIDATIONS}/{DRIVER_CTR_READY}").unlink(missing_ok=True)


def light_standins() -> dict[str, Program]:
    """A program for every ``nvidia-standin-*`` name the simulator's default registry has (and the contract's
    validation names), none of which runs one of our agents; register them over the defaults."""
    out: dict[str, Program] = {}
    for name in [*heavy_standins(), *(PROGRAM_PREFIX + c for c in CHECKS)]:
        suffix = name.removeprefix(PROGRAM_PREFIX)
        if suffix in CHECKS:
            out[name] = _check(*CHECKS[suffix])
        elif suffix in WAITS:
            out[name] = _wait(WAITS[suffix])
        elif suffix in ONE_SHOT or suffix.endswith("-init"):
            out[name] = _exit
        elif suffix == "nvidia-driver-ctr":
            out[name] = _driver
        elif suffix == "k8s-driver-manager":
            out[name] = _driver_manager
        elif suffix == "nvidia-operator-validator":
            out[name] = _validator
        else:
            out[name] = _main
    return out
