"""Containers of our node agents in the Network Operator's states (pure).

A section whose image is this operator's (:func:`runs_agent`: the same repository as the agent image,
any tag; ``render/implementations.py``'s rule for the GPU operands) runs ``gpu-operator agent NAME``
instead of upstream's program. Our agents find the node's NICs through the host's sysfs and device
nodes under ``HOST_ROOT`` and report readiness through the agent's ready file.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_operator.render.agents import EXECUTABLE
from gpu_operator.render.catalog import READY_FILE
from gpu_operator.render.implementations import repository_of
from gpu_operator.render.network.objects import JSON, Image, Placement, field_env

HOST_ROOT = "/host"
#: The host's sysfs (read-only) and device nodes, where the NIC agents find the NICs (``HOST_ROOT``).
AGENT_HOST_VOLUMES: tuple[JSON, ...] = (
    {"name": "host-sys", "hostPath": {"path": "/sys"}},
    {"name": "host-dev", "hostPath": {"path": "/dev"}},
)
AGENT_HOST_MOUNTS: tuple[JSON, ...] = (
    {"name": "host-sys", "mountPath": f"{HOST_ROOT}/sys", "readOnly": True},
    {"name": "host-dev", "mountPath": f"{HOST_ROOT}/dev"},
)


def runs_agent(image: Image, place: Placement) -> bool:
    """The section's image is this operator's (same repository, any tag or digest): it runs our agent."""
    return bool(place.agent_image) and repository_of(image.ref) == repository_of(place.agent_image)


def agent_probe() -> JSON:
    """Ready once the agent says so: ``gpu-operator agent`` touches the ready file (as the GPU operands)."""
    return {"exec": {"command": ["test", "-f", READY_FILE]}, "periodSeconds": 5, "failureThreshold": 1}


def agent_fields(name: str, *, env: Sequence[JSON] = (), probe: bool = True) -> JSON:
    """Container fields of our agent NAME: its command, ``HOST_ROOT``, ``NODE_NAME`` and ``env``, and a
    readiness probe on the agent's ready file (``probe``; init containers have none)."""
    out: JSON = {
        "command": [EXECUTABLE, "agent", name],
        "env": [{"name": "HOST_ROOT", "value": HOST_ROOT}, field_env("NODE_NAME", "spec.nodeName"), *env],
    }
    if probe:
        out["readinessProbe"] = agent_probe()
    return out
