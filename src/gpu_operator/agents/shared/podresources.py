"""Where an agent finds the kubelet's PodResources socket (the exporter lists pods, the validator reads
what is allocatable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.kubelet.paths import POD_RESOURCES_SOCKET


@runtime_checkable
class OwnPodResources(Protocol):
    """A context with a PodResources socket of its own (each simulated node has one)."""

    @property
    def pod_resources_socket(self) -> Path: ...


def pod_resources_socket(ctx: AgentContext, *, variable: str) -> Path:
    """The PodResources socket: ``variable`` (a container path) when set, else the context's own socket
    (simulated nodes have one each), else the kubelet's standard path inside the container."""
    configured = ctx.env.get(variable)
    if configured:
        return ctx.path(configured)
    if isinstance(ctx, OwnPodResources):
        return Path(ctx.pod_resources_socket)
    return ctx.path(str(POD_RESOURCES_SOCKET))
