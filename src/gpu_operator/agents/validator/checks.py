"""What each component checks: the driver answers, the toolkit's files are valid, CUDA runs, GPUs are allocatable.

Every check returns a one-line summary of what it found, or raises :class:`ValidationError` whose
message says precisely what is missing, so an init container stuck in a loop explains itself.

The plugin check reads the Node's allocatable resources (``agents.shared.allocatable``: the Node's
``status.allocatable`` when the node accessor can read it, else the kubelet's PodResources
``GetAllocatableResources``).
"""

from __future__ import annotations

import asyncio

from gpu_operator.agents.runtime import AgentContext, AgentFailedError
from gpu_operator.agents.shared.allocatable import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    AllocatableError,
    allocatable_gpus,
)
from gpu_operator.agents.validator.cuda import CudaError, cuda_check
from gpu_operator.agents.validator.toolkit import ToolkitError, check_toolkit
from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuNotFoundError


class ValidationError(AgentFailedError):
    """A component's check failed; the message says what is missing."""


def check_driver(backend: GpuBackend) -> str:
    """The backend initialised, reports a driver version and at least one answering GPU (blocking)."""
    try:
        version = backend.driver_version()
    except GpuNotFoundError as exc:
        raise ValidationError(f"no NVIDIA driver: {exc}") from exc
    except GpuError as exc:
        raise ValidationError(f"the NVIDIA driver does not answer: {exc}") from exc
    try:
        devices = list(backend.devices())
    except GpuError as exc:
        raise ValidationError(f"driver {version} is loaded but a GPU does not answer: {exc}") from exc
    if not devices:
        raise ValidationError(f"driver {version} is loaded but reports no GPU")
    models = sorted({d.name for d in devices})
    return f"driver {version}, {len(devices)} GPU(s): {', '.join(models)}"


async def check_toolkit_files(ctx: AgentContext) -> str:
    try:
        return await asyncio.to_thread(check_toolkit, host_path=ctx.host_path)
    except ToolkitError as exc:
        raise ValidationError(f"container toolkit not ready: {exc}") from exc


async def check_cuda(ctx: AgentContext) -> str:
    try:
        return await asyncio.to_thread(cuda_check, ctx.gpu)
    except CudaError as exc:
        raise ValidationError(f"CUDA workload failed: {exc}") from exc


async def check_plugin(ctx: AgentContext) -> str:
    """The node advertises at least one allocatable ``nvidia.com/gpu`` or ``nvidia.com/mig-*``."""
    try:
        gpus, source = await allocatable_gpus(ctx)
    except AllocatableError as exc:
        raise ValidationError(str(exc)) from exc
    total = sum(gpus.values())
    if total < 1:
        seen = ", ".join(f"{k}={v}" for k, v in sorted(gpus.items())) or "no NVIDIA resource at all"
        raise ValidationError(
            f"node {ctx.node_name} advertises no allocatable {GPU_RESOURCE} or {MIG_RESOURCE_PREFIX}* ({source}: "
            f"{seen}): the device plugin has not registered with the kubelet, or every GPU is unhealthy"
        )
    return ", ".join(f"{k}={v}" for k, v in sorted(gpus.items()) if v) + f" allocatable ({source})"
