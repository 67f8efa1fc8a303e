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
import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.api.envtext import env_duration, env_text
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


class SafeLoadSettingsError(SafeLoadError, ConfigRefusedError):
    """A variable of the init container's environment it cannot use; one line naming it."""


# A Kubernetes annotation key: an optional DNS-subdomain prefix and a name of at most 63 characters.
_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def settings_from_env(env: Mapping[str, str]) -> tuple[str, float]:
    """(``SAFE_LOAD_ANNOTATION``, ``SAFE_LOAD_POLL_SECONDS``): an annotation key and 100ms to 5m between
    re-reads; SafeLoadSettingsError naming the variable for a bad value."""
    try:
        annotation = env_text(
            env, "SAFE_LOAD_ANNOTATION", default=ANNOTATION, pattern=_KEY, what="an annotation key", limit=317
        )
        poll = env_duration(env, "SAFE_LOAD_POLL_SECONDS", default=POLL_SECONDS, minimum=0.1, maximum=300.0)
    except ConfigRefusedError as error:
        raise SafeLoadSettingsError(str(error)) from None
    return annotation, POLL_SECONDS if poll is None else poll


async def main(ctx: AgentContext) -> None:
    """Set the safe-load annotation on this node, wait until the upgrade controller removes it."""
    annotation, poll = settings_from_env(ctx.env)
    node = ctx.node
    if not ctx.node_name or not isinstance(node, NodeAnnotations):
        raise SafeLoadError("ofed-safe-load needs its Node (NODE_NAME and API access) to set its annotation")
    await node.patch_annotations({annotation: "true"})
    log.info("ofed-safe-load[%s]: %s=true set, waiting for the node to be drained", ctx.node_name, annotation)
    while (await node.annotations()).get(annotation):
        if await ctx.sleep(poll):
            raise SafeLoadError(f"stopped while waiting for {annotation} to be removed from {ctx.node_name}")
    log.info("ofed-safe-load[%s]: %s removed: the driver may load", ctx.node_name, annotation)
