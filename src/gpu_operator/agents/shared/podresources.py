"""Where an agent finds the kubelet's PodResources socket (the exporter lists pods, the validator reads
what is allocatable).
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.kubelet.paths import POD_RESOURCES_SOCKET


def pod_resources_socket(ctx: AgentContext, *, variable: str) -> Path:
    """The PodResources socket: ``variable`` (a container path) when set, else the context's own socket
    (simulated nodes have one each), else the kubelet's standard path inside the container."""
    configured = ctx.env.get(variable)
    if configured:
        return ctx.path(configured)
    own = getattr(ctx, "pod_resources_socket", None)
    return Path(own) if own else ctx.path(str(POD_RESOURCES_SOCKET))
