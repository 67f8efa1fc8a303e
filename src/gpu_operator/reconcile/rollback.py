"""What the policy reconciler renders for the driver while a canary rollout rolls back.

The canary stage (``upgrade.canary``) keeps the last good ``spec.driver`` in the rollout's ConfigMap.
While it rolls back from the policy's current ``spec.driver``, the reconciler renders that good one
instead (the policy's ``upgradePolicy`` stays), so the driver DaemonSets return to the template the
other nodes never left: only the canaries' driver pods are out of date, and the upgrade controller
takes them back. A newer ``spec.driver`` ends the override by itself (the rollback was of another
target). Every driver DaemonSet of the ClusterPolicy is stamped with the digest of the spec.driver it
was rendered from (``nvidia.com/driver-spec-digest``), which is how the canary stage tells which
driver a pod in sync runs. The stamp is on the DaemonSet, not its pod template: it restarts nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.render.states import StateManifests
from gpu_operator.upgrade.canary import ROLLBACK_PHASES
from gpu_operator.upgrade.drivers import GPU_DRIVER_SELECTOR
from gpu_operator.upgrade.rollout import read_rollout, target_of


async def spec_to_render(kube: Kube, *, namespace: str, policy: JSON) -> tuple[JSON, str]:
    """The ClusterPolicy spec to render (the policy's own, or with the last good driver while rolling
    back) and the spec.driver digest its driver DaemonSets carry."""
    spec: JSON = policy.get("spec") or {}
    target = target_of(policy)
    # The cached ConfigMap has no values but keeps the phase label: most passes need no API read.
    cached = await kube.get("v1", "ConfigMap", keys.DRIVER_ROLLOUT_CONFIGMAP, namespace=namespace)
    if (cached is None or (cached["metadata"].get("labels") or {}).get(keys.DRIVER_ROLLOUT_PHASE)
            not in ROLLBACK_PHASES):  # fmt: skip
        return spec, target.digest
    rollout, _ = await read_rollout(kube, namespace=namespace)
    good = rollout.rendered_driver(target=target.digest)
    if good is None:
        return spec, target.digest
    upgrade = (spec.get("driver") or {}).get("upgradePolicy")
    driver = {**good, "upgradePolicy": upgrade} if upgrade is not None else good
    return {**spec, "driver": driver}, rollout.good


def _driver_daemonset(obj: JSON) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return obj.get("kind") == "DaemonSet" and all(labels.get(k) == v for k, v in GPU_DRIVER_SELECTOR.items())


def stamped(states: Sequence[StateManifests], *, digest: str) -> list[StateManifests]:
    """``states`` with each driver DaemonSet annotated with ``digest`` (copies: rendered objects are shared)."""
    out = []
    for state in states:
        if not any(_driver_daemonset(o) for o in state.objects):
            out.append(state)
            continue
        objects = []
        for obj in state.objects:
            if _driver_daemonset(obj):
                meta = obj["metadata"]
                notes = {**(meta.get("annotations") or {}), keys.DRIVER_SPEC_DIGEST: digest}
                objects.append({**obj, "metadata": {**meta, "annotations": notes}})
            else:
                objects.append(obj)
        out.append(dataclasses.replace(state, objects=tuple(objects)))
    return out
