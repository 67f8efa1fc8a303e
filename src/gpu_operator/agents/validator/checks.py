"""What each component checks: the driver answers, the toolkit's files are valid, CUDA runs, GPUs are allocatable.

Every check returns a one-line summary of what it found, or raises :class:`ValidationError` whose
message says precisely what is missing, so an init container stuck in a loop explains itself.

The plugin check reads the Node's allocatable resources. ``NodeAccess`` (``agents.runtime``) only
reads labels, so a node object that also has ``allocatable()`` (:class:`NodeStatusAccess`) is used
when present; otherwise the kubelet's own answer is asked for, PodResources
``GetAllocatableResources``, which lists the devices the kubelet can assign (what allocatable counts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpu_operator.agents.exporter.pods import pod_resources_socket
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.validator.cuda import CudaError, cuda_check
from gpu_operator.agents.validator.toolkit import ToolkitError, check_toolkit
from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuNotFoundError

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


class ValidationError(Exception):
    """A component's check failed; the message says what is missing."""


@runtime_checkable
class NodeStatusAccess(Protocol):
    """A Node accessor that can also read ``status.allocatable`` (resource -> quantity)."""

    async def allocatable(self) -> Mapping[str, str]: ...


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


def _quantity(value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        return 0  # extended resources are integers; anything else cannot be a GPU count


async def allocatable_gpus(ctx: AgentContext) -> tuple[dict[str, int], str]:
    """GPU resources allocatable on this node and where that was read (raises ValidationError)."""
    node = ctx.node
    if isinstance(node, NodeStatusAccess):
        values = dict(await node.allocatable())
        source = f"Node {ctx.node_name} status.allocatable"
    else:
        from gpu_operator.kubelet.podresources import allocatable_resources  # noqa: PLC0415 - loads gRPC

        socket = pod_resources_socket(ctx, variable="POD_RESOURCES_SOCKET")
        if not socket.exists():
            raise ValidationError(
                f"cannot read allocatable GPUs: the node accessor has no allocatable() and the kubelet's "
                f"PodResources socket {socket} does not exist"
            )
        try:
            devices = await allocatable_resources(socket=socket, timeout=5.0)
        except Exception as exc:  # any gRPC failure is a reason to report, not to crash on
            raise ValidationError(f"cannot read allocatable GPUs from the kubelet ({socket}): {exc}") from exc
        counts: dict[str, int] = {}
        for entry in devices:
            counts[entry.resource_name] = counts.get(entry.resource_name, 0) + len(entry.device_ids)
        values = {k: str(v) for k, v in counts.items()}
        source = f"kubelet PodResources GetAllocatableResources on {socket}"
    gpus = {
        name: _quantity(value)
        for name, value in values.items()
        if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)
    }
    return gpus, source


async def check_plugin(ctx: AgentContext) -> str:
    """The node advertises at least one allocatable ``nvidia.com/gpu`` or ``nvidia.com/mig-*``."""
    gpus, source = await allocatable_gpus(ctx)
    total = sum(gpus.values())
    if total < 1:
        seen = ", ".join(f"{k}={v}" for k, v in sorted(gpus.items())) or "no NVIDIA resource at all"
        raise ValidationError(
            f"node {ctx.node_name} advertises no allocatable {GPU_RESOURCE} or {MIG_RESOURCE_PREFIX}* ({source}: "
            f"{seen}): the device plugin has not registered with the kubelet, or every GPU is unhealthy"
        )
    return ", ".join(f"{k}={v}" for k, v in sorted(gpus.items()) if v) + f" allocatable ({source})"
