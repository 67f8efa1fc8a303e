"""The GPU resources allocatable on this node (``nvidia.com/gpu`` and ``nvidia.com/mig-*``).

Read by the validator's plugin check and by the node status exporter. ``NodeAccess``
(``agents.runtime``) only reads labels, so a node object that also has ``allocatable()``
(:class:`NodeStatusAccess`) is used when present; otherwise the kubelet's own answer is asked for,
PodResources ``GetAllocatableResources``, which lists the devices the kubelet can assign (what
allocatable counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.podresources import pod_resources_socket
from gpu_operator.names import keys

GPU_RESOURCE = keys.GPU_RESOURCE
MIG_RESOURCE_PREFIX = keys.MIG_RESOURCE_PREFIX


class AllocatableError(Exception):
    """The allocatable resources cannot be read; the message says from where and why."""


@runtime_checkable
class NodeStatusAccess(Protocol):
    """A Node accessor that can also read ``status.allocatable`` (resource -> quantity)."""

    async def allocatable(self) -> Mapping[str, str]: ...


def _quantity(value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        return 0  # extended resources are integers; anything else cannot be a GPU count


async def allocatable_gpus(ctx: AgentContext) -> tuple[dict[str, int], str]:
    """GPU resources allocatable on this node and where that was read (raises AllocatableError)."""
    node = ctx.node
    if isinstance(node, NodeStatusAccess):
        values = dict(await node.allocatable())
        source = f"Node {ctx.node_name} status.allocatable"
    else:
        from gpu_operator.kubelet.podresources import allocatable_resources  # noqa: PLC0415 - loads gRPC

        socket = pod_resources_socket(ctx, variable="POD_RESOURCES_SOCKET")
        if not socket.exists():
            raise AllocatableError(
                f"cannot read allocatable GPUs: the node accessor has no allocatable() and the kubelet's "
                f"PodResources socket {socket} does not exist"
            )
        try:
            devices = await allocatable_resources(socket=socket, timeout=5.0)
        except Exception as exc:  # any gRPC failure is a reason to report, not to crash on
            raise AllocatableError(f"cannot read allocatable GPUs from the kubelet ({socket}): {exc}") from exc
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
