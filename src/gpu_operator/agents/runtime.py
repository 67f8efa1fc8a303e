"""What an agent program needs from where it runs: :class:`AgentContext` and :class:`NodeAccess`.

Agents are ``async def main(ctx)`` functions. On a real node the context wraps the container's
environment, paths and the in-cluster API; on a simulated node the simulator's ProgramContext
provides the same attributes per node, so one process runs many agents. Agents never keep module
state and never import the simulator.

Servers that listen on "all addresses" (exporters) bind ``GPU_OPERATOR_BIND_ADDRESS`` instead when the
environment sets it: the simulator runs many nodes' pods in one network namespace and gives each pod
its own loopback address; real pods never set it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from gpu_operator.gpu.backend import GpuBackend


class AgentFailedError(Exception):
    """An agent's run ended in a failure its one-line message says (a check that gave up): the container
    exits 1 with the message as its termination message, where the kubelet and the operator read it."""


class NodeAccess(Protocol):
    """The agent's own Node object (labels only: that is all agents read or write)."""

    async def labels(self) -> dict[str, str]:
        """The Node's current labels."""
        ...

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        """Set (str) or remove (None) labels on the Node."""
        ...


class AgentContext(Protocol):
    """The per-container view an agent program gets."""

    @property
    def node_name(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def plugin_dir(self) -> Path: ...

    @property
    def gpu(self) -> GpuBackend: ...

    @property
    def node(self) -> NodeAccess | None: ...

    def path(self, container_path: str) -> Path:
        """Where a path inside the container lives on this machine."""
        ...

    def host_path(self, node_path: str) -> Path:
        """Where a path on the node's host filesystem lives on this machine."""
        ...

    def set_ready(self, ready: bool = True) -> None:
        """Report readiness (what a readiness probe would see)."""
        ...

    async def sleep(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds``; True once the container is asked to stop."""
        ...
