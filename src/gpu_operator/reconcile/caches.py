"""The operator's informers, and which work key each change wakes.

Nine caches serve every list a pass makes of a large or busy kind: ClusterPolicies, NVIDIADrivers,
Nodes (slim), the operator namespace's DaemonSets, ConfigMaps and Secrets (metadata only: a pass
needs their names, owners and applied hashes, and Helm keeps whole releases in Secrets; ConfigMaps
also keep their data keys, which NVIDIA's driver mounts one by one), the driver DaemonSets'
ControllerRevisions, and the driver and validator pods (slim). Lists of everything else
(RBAC objects, Services, PDBs) still go to the API server: they are few, small, and not worth a
watch each. An idle upgrade pass thus makes no request at all.

A change wakes the work keys that read it (one writer, one reader per fact):

- ConfigMaps and Secrets: the policy reconciler (a ConfigMap a policy names may appear later, or
  gain or lose a key; a change of values only wakes nobody);
- policies, NVIDIADrivers and DaemonSets: both keys (the reconciler renders them; the upgrade
  controller reads the driver DaemonSets' revisions and the policies' upgrade knobs);
- a Node: the upgrade controller always; the policy reconciler only when something it reads changed
  (labels other than the upgrade controller's own, the container runtime, a node added or removed),
  so a rollout's own node writes do not keep the reconciler busy;
- driver ControllerRevisions, driver and validator pods: the upgrade controller only. The pods'
  readiness is how it moves a node on (a pass reacts to the pod becoming Ready, instead of finding
  it on a timer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_operator.kube.informer import JSON, Informer, watching
from gpu_operator.kube.slim import slim_config_map, slim_metadata, slim_node, slim_pod
from gpu_operator.upgrade.collect import DRIVER_SELECTOR, VALIDATOR_SELECTOR
from gpu_operator.upgrade.model import KEY_PREFIX

Wake = Callable[[], None]


def reconciler_view(node: JSON | None) -> tuple[Any, ...] | None:
    """What the policy reconciler reads from a Node: labels (without the upgrade controller's) and the
    container runtime (``render.node_info``); None for no node."""
    if node is None:
        return None
    labels = node["metadata"].get("labels") or {}
    runtime = ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion", "")
    return tuple(sorted(i for i in labels.items() if not i[0].startswith(KEY_PREFIX))), runtime


def operator_informers(
    client: Any, *, namespace: str, wake_all: Wake, wake_reconciler: Wake, wake_upgrade: Wake
) -> tuple[Informer, ...]:
    """The informers of an operator in ``namespace``, each telling the right keys about its changes."""

    def everyone(_old: JSON | None, _new: JSON | None) -> None:
        wake_all()

    def reconciler(_old: JSON | None, _new: JSON | None) -> None:
        wake_reconciler()

    def upgrades(_old: JSON | None, _new: JSON | None) -> None:
        wake_upgrade()

    def node_changed(old: JSON | None, new: JSON | None) -> None:
        if reconciler_view(old) != reconciler_view(new):
            wake_all()
        else:
            wake_upgrade()

    return (
        watching(client, "nvidia.com/v1", "ClusterPolicy", on_change=everyone),
        watching(client, "nvidia.com/v1alpha1", "NVIDIADriver", on_change=everyone),
        watching(client, "v1", "Node", transform=slim_node, on_change=node_changed),
        watching(client, "apps/v1", "DaemonSet", namespace=namespace, on_change=everyone),
        watching(client, "v1", "ConfigMap", namespace=namespace, transform=slim_config_map, on_change=reconciler),
        watching(client, "v1", "Secret", namespace=namespace, transform=slim_metadata, on_change=reconciler),
        watching(client, "apps/v1", "ControllerRevision", namespace=namespace, labels=DRIVER_SELECTOR,
                 on_change=upgrades),
        watching(client, "v1", "Pod", namespace=namespace, labels=DRIVER_SELECTOR, transform=slim_pod,
                 on_change=upgrades),
        watching(client, "v1", "Pod", namespace=namespace, labels=VALIDATOR_SELECTOR, transform=slim_pod,
                 on_change=upgrades),
    )  # fmt: skip
