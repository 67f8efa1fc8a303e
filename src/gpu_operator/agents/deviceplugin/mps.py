"""MPS sharing is advertised only once a control daemon serves it.

An MPS-shared replica's Allocate response points the container at the daemon's pipe directory
(``<mpsRoot>/<resource>/pipe``); with no daemon behind it, CUDA in the container fails. So a resource
shared through MPS is served only while the daemon's ready marker ``<mpsRoot>/<resource>/.ready``
exists (the MPS control daemon writes it once it answers on the pipe); until then the plugin leaves
the resource out and says why (``gpu-operator agent mps-control-daemon`` runs the daemons).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_operator.agents.shared.mpsready import ready_marker
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.agents.shared.resources import Resource

__all__ = ["readiness", "ready_marker", "split_ready"]


def split_ready(resources: Sequence[Resource], settings: Settings) -> tuple[list[Resource], list[str]]:
    """The resources to serve, and the MPS-shared ones left out because their daemon is not ready."""
    serve: list[Resource] = []
    waiting: list[str] = []
    for resource in resources:
        mps = resource.shared_mode == "mps"
        if mps and not ready_marker(mps_root=settings.mps_root, resource=resource.name).is_file():
            waiting.append(resource.name)
        else:
            serve.append(resource)
    return serve, waiting


def readiness(resources: Sequence[Resource], settings: Settings) -> tuple[bool, ...]:
    """Each MPS-shared resource's daemon readiness, for the layout fingerprint (a daemon coming up or
    going away makes the plugin rebuild what it advertises)."""
    return tuple(
        ready_marker(mps_root=settings.mps_root, resource=r.name).is_file() for r in resources if r.shared_mode == "mps"
    )
