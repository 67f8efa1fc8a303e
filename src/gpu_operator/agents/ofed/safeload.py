"""``gpu-operator agent ofed-safe-load``: the OFED pod's init container of safe driver loading.

Upstream's semantics (Mellanox network-operator-init-container): the container sets the annotation
``nvidia.com/ofed-driver-upgrade.driver-wait-for-safe-load=true`` on its own Node (a merge patch)
and waits until the annotation is gone or empty, then exits 0 and the driver container starts. The
upgrade controller (``upgrade/plan.py``, driver ``ofed``) sees the annotation, takes the node through
cordon, wait-for-jobs and drain per ``ofedDriver.upgradePolicy``, and removes it once the new
driver pod is the one waiting: the driver loads only on a drained node. Stopped while waiting, it
exits with an error (upstream: "waiting canceled"), so the driver never loads undrained.

``SAFE_LOAD_ANNOTATION`` overrides the annotation, ``SAFE_LOAD_POLL_SECONDS`` the re-read interval
(upstream re-reads every 5 s besides watching; default here 1 s).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.names import network as net
from gpu_operator.names.keys import upgrade_keys

log = logging.getLogger(__name__)
ANNOTATION = upgrade_keys(net.OFED_DRIVER_NAME).safe_load
POLL_SECONDS = 1.0


class SafeLoadError(Exception):
    """The wait could not be set up or was cancelled; the message says why."""


@runtime_checkable
class NodeAnnotations(Protocol):
    """The agent's Node's annotations (``kube.nodeaccess.LightkubeNode``, the simulator's ``NodeLabels``)."""

    async def annotations(self) -> dict[str, str]: ...

    async def patch_annotations(self, changes: Mapping[str, str | None]) -> None: ...


def _poll_seconds(env: Mapping[str, str]) -> float:
    text = env.get("SAFE_LOAD_POLL_SECONDS", "").strip()
    try:
        value = float(text) if text else POLL_SECONDS
    except ValueError as error:
        raise SafeLoadError(f"SAFE_LOAD_POLL_SECONDS: {text!r} is not a number of seconds") from error
    if value <= 0:
        raise SafeLoadError(f"SAFE_LOAD_POLL_SECONDS: {text!r} must be more than 0")
    return value


async def main(ctx: AgentContext) -> None:
    """Set the safe-load annotation on this node, wait until the upgrade controller removes it."""
    annotation = ctx.env.get("SAFE_LOAD_ANNOTATION", "").strip() or ANNOTATION
    poll = _poll_seconds(ctx.env)
    node = ctx.node
    if not ctx.node_name or not isinstance(node, NodeAnnotations):
        raise SafeLoadError("ofed-safe-load needs its Node (NODE_NAME and API access) to set its annotation")
    await node.patch_annotations({annotation: "true"})
    log.info("ofed-safe-load[%s]: %s=true set, waiting for the node to be drained", ctx.node_name, annotation)
    while (await node.annotations()).get(annotation):
        if await ctx.sleep(poll):
            raise SafeLoadError(f"stopped while waiting for {annotation} to be removed from {ctx.node_name}")
    log.info("ofed-safe-load[%s]: %s removed: the driver may load", ctx.node_name, annotation)
