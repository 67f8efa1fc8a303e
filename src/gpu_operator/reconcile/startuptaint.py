"""Lifting the startup taint (our extension ``startupTaint``) from GPU nodes whose stack is validated.

A cluster's autoscaled node groups register new GPU nodes with the taint, so that no workload lands on a
node whose driver, toolkit and device plugin are not yet working; every operand tolerates it
(``render.pods``). Once the node's validator pod is Ready (its init containers have validated the driver,
the toolkit, CUDA and the device plugin, in that order) the policy reconciler removes the taint. The
patch first tests the taint list it read, so a taint another writer added or removed meanwhile is never
lost: the API server refuses the patch, and the next pass reads the node again. A node that has no GPU,
or whose validator is not Ready, keeps the taint: the operator never declares usable a node it has not
validated. Any taint with the key goes, whatever its value and effect. With sandbox workloads on, a node
for VMs runs the sandbox validator instead of the validator, and its pod being Ready counts the same
(no watch wakes the reconciler for it: the lift comes with the next pass, which a policy not yet ready
requeues soon).

The plan (:func:`lift_plan`) is pure; :func:`lift_startup_taints` applies it, one Event per node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.defaults import is_enabled
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import keys
from gpu_operator.names.objects import is_ready
from gpu_operator.render.catalog import operand
from gpu_operator.runtime.backoff import status_code
from gpu_operator.upgrade.collect import VALIDATOR_SELECTOR

log = logging.getLogger(__name__)
EVENT_REASON = "StartupTaintRemoved"
#: What the API server answers when the node changed since it was read (a failed test) or is gone.
STALE = (404, 409, 422)
EVENT_NAMESPACE = "default"  # a Node's Events live in the default namespace, as the kubelet's do
SANDBOX_VALIDATOR_SELECTOR = {"app": operand("state-sandbox-validation").daemonset}


@dataclass(frozen=True, kw_only=True)
class Lift:
    """One node's taints as read, and without the startup taint."""

    node: JSON
    taints: list[JSON]
    kept: list[JSON]


def validated_nodes(validators: Sequence[Mapping[str, Any]]) -> set[str]:
    """The nodes where a validator pod is Ready and not being deleted."""
    return {
        str((pod.get("spec") or {}).get("nodeName"))
        for pod in validators
        if is_ready(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")
    }


def lift_plan(*, nodes: Sequence[JSON], validators: Sequence[Mapping[str, Any]], key: str) -> list[Lift]:
    """The GPU nodes that carry the startup taint ``key`` and whose validator is Ready."""
    passed = validated_nodes(validators)
    out = []
    for node in nodes:
        taints = list((node.get("spec") or {}).get("taints") or [])
        kept = [t for t in taints if t.get("key") != key]
        labels = (node.get("metadata") or {}).get("labels") or {}
        name = node["metadata"]["name"]
        if len(kept) < len(taints) and labels.get(keys.GPU_PRESENT) == "true" and name in passed:
            out.append(Lift(node=node, taints=taints, kept=kept))
    return out


async def lift_startup_taints(kube: Kube, *, nodes: Sequence[JSON], spec: ClusterPolicySpec, namespace: str) -> int:
    """Remove the startup taint from every validated GPU node that still carries it; how many were lifted.
    A node whose taints changed since they were read is left for the next pass."""
    if not is_enabled(spec, section="startupTaint"):
        return 0
    key = spec.startup_taint.key
    if not any(t.get("key") == key for node in nodes for t in (node.get("spec") or {}).get("taints") or []):
        return 0  # no node is held: no need to read the validators
    validators = await kube.list_objects("v1", "Pod", namespace=namespace, labels=VALIDATOR_SELECTOR)
    if is_enabled(spec, section="sandboxWorkloads"):
        # A node for VMs (vm-passthrough, vm-vgpu) runs the sandbox validator instead: its Ready counts.
        validators += await kube.list_objects("v1", "Pod", namespace=namespace, labels=SANDBOX_VALIDATOR_SELECTOR)
    lifted = 0
    for lift in lift_plan(nodes=nodes, validators=validators, key=key):
        name = lift.node["metadata"]["name"]
        test = {"op": "test", "path": "/spec/taints", "value": lift.taints}
        replace = {"op": "replace", "path": "/spec/taints", "value": lift.kept}
        try:
            await kube.json_patch("v1", "Node", name, [test, replace])
        except Exception as error:
            if status_code(error) not in STALE:
                raise  # the API server failing is the loop's to count and retry
            log.info("node %s: changed since read, startup taint left for the next pass (%s)", name, error)
            continue
        lifted += 1
        message = f"the GPU stack passed validation: taint {key} removed"
        await kube.event(involved=lift.node, reason=EVENT_REASON, message=message, namespace=EVENT_NAMESPACE)
    return lifted
