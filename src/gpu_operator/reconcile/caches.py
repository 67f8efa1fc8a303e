"""The operator's informers, and which work key each change wakes.

Seventeen caches serve every list a pass makes of a large or busy kind: ClusterPolicies, NVIDIADrivers,
Nodes (slim), the operator namespace's DaemonSets, ConfigMaps and Secrets (metadata only: a pass
needs their names, owners and applied hashes, and Helm keeps whole releases in Secrets; ConfigMaps
also keep their data keys, which NVIDIA's driver mounts one by one), the driver DaemonSets'
ControllerRevisions, the driver and validator pods (slim), the Node Events (slim), and the other kinds a state owns
(:data:`OWNED_KINDS`: ServiceAccounts, Services, RBAC objects, RuntimeClasses carrying the state label,
metadata only), which every pass lists to find what to prune and which hashes are applied: seven
lists a pass, most of a pass's requests and CPU, now read from memory. ServiceMonitors (only when
their CRD is installed) and PDBs still go to the API server. An idle upgrade pass makes no request at all.

A change wakes the work keys that read it (one writer, one reader per fact):

- ConfigMaps and Secrets: the policy reconciler (a ConfigMap a policy names may appear later, or
  gain or lose a key; a change of values only wakes nobody); the driver rollout's ConfigMap also the
  upgrade controller (``gpu-operator upgrade rollback`` annotates it);
- policies and NVIDIADrivers: both keys (the reconciler renders them; the upgrade controller reads the
  policies' upgrade knobs); a ClusterPolicy change of its status only (the operator's own writes) wakes
  nobody: no pass reads a status it did not write, and re-reading it would be a pass that does nothing;
- DaemonSets: the reconciler always (their status is the policy's readiness); the upgrade controller
  only for a driver DaemonSet (it reads their templates and uids) or one added or removed (whether the
  validator's exists): a rollout's or a spec change's hundreds of status updates of the other operands'
  DaemonSets woke an upgrade pass each;
- the other owned kinds: the policy reconciler (an operand object deleted or relabelled by hand is
  put back at once);
- a Node: the upgrade controller always; the policy reconciler only when something it reads changed
  (labels other than the upgrade controller's own, the container runtime, a node added or removed),
  so a rollout's own node writes do not keep the reconciler busy;
- Node Events in the namespace where they live (``remediation.collect``): the remediation controller
  only, and only for the device plugin's ``GpuUnhealthy`` and the remediation controller's own
  reasons; a Node change wakes it too (its taints, annotations and bootID are its state);
- driver ControllerRevisions, driver and validator pods: the upgrade controller only. The pods'
  readiness is how it moves a node on (a pass reacts to the pod becoming Ready, instead of finding
  it on a timer). A validator pod only while its node waits on validation (the only nodes whose
  validators a pass reads, ``upgrade.collect``): the rollout's hundreds of validator pod changes on
  nodes that wait for nothing woke a pass each. A node entering that state wakes the pass itself.
  A validator pod becoming Ready on a tainted node also wakes the policy reconciler, which lifts the
  startup taint (``reconcile.startuptaint``) from nodes whose stack is validated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_operator.kube.informer import JSON, Informer, watching
from gpu_operator.kube.slim import slim_config_map, slim_metadata, slim_node, slim_pod
from gpu_operator.names import keys
from gpu_operator.names.objects import is_ready
from gpu_operator.remediation.collect import EVENT_FIELDS, EVENT_NAMESPACE, REASONS, slim_event
from gpu_operator.render.states import PRUNE_KINDS
from gpu_operator.upgrade.collect import DRIVER_SELECTOR, VALIDATOR_SELECTOR, VALIDATORS_NEEDED
from gpu_operator.upgrade.model import GPU, KEY_PREFIX

Wake = Callable[[], None]
#: (apiVersion, kind, namespaced) of the kinds a state owns that no other cache here covers, listed by
#: every pass with the state label: ``PRUNE_KINDS`` less those with caches of their own.
OWNED_KINDS = tuple(k for k in PRUNE_KINDS if k[1] not in {"ConfigMap", "DaemonSet", "ServiceMonitor"})
_UNREAD_META = ("resourceVersion", "managedFields")


def _without_status(obj: JSON | None) -> JSON | None:
    """An object less its status and the metadata that changes with every write."""
    if obj is None:
        return None
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNREAD_META}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def reconciler_view(node: JSON | None) -> tuple[Any, ...] | None:
    """What the policy reconciler reads from a Node: labels (without the upgrade controller's) and the
    container runtime (``render.node_info``); None for no node."""
    if node is None:
        return None
    labels = node["metadata"].get("labels") or {}
    runtime = ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion", "")
    return tuple(sorted(i for i in labels.items() if not i[0].startswith(KEY_PREFIX))), runtime


def _is_driver(obj: JSON | None) -> bool:
    """Whether a DaemonSet is one the upgrade controller reads (``upgrade.collect``'s driver selector)."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in DRIVER_SELECTOR.items())


def _tainted(nodes: Informer, pod: JSON) -> bool:
    """Whether the pod's node carries any taint (only then can it carry the startup taint)."""
    node = nodes.items.get(("", str((pod.get("spec") or {}).get("nodeName") or "")))
    return bool(node and (node.get("spec") or {}).get("taints"))


def _nobody() -> None:
    return None


def operator_informers(
    client: Any,
    *,
    namespace: str,
    wake_all: Wake,
    wake_reconciler: Wake,
    wake_upgrade: Wake,
    wake_remediation: Wake = _nobody,
) -> tuple[Informer, ...]:
    """The informers of an operator in ``namespace``, each telling the right keys about its changes."""

    def everyone(_old: JSON | None, _new: JSON | None) -> None:
        wake_all()

    def reconciler(_old: JSON | None, _new: JSON | None) -> None:
        wake_reconciler()

    def upgrades(_old: JSON | None, _new: JSON | None) -> None:
        wake_upgrade()

    def policy_changed(old: JSON | None, new: JSON | None) -> None:
        if _without_status(old) != _without_status(new):
            wake_all()

    def node_changed(old: JSON | None, new: JSON | None) -> None:
        wake_remediation()
        if reconciler_view(old) != reconciler_view(new):
            wake_all()
        else:
            wake_upgrade()

    def event_changed(old: JSON | None, new: JSON | None) -> None:
        if new is not None and new.get("reason") in REASONS:
            wake_remediation()

    def daemonset_changed(old: JSON | None, new: JSON | None) -> None:
        wake_reconciler()
        if old is None or new is None or any(_is_driver(obj) for obj in (old, new)):
            wake_upgrade()

    def config_changed(old: JSON | None, new: JSON | None) -> None:
        wake_reconciler()
        # `gpu-operator upgrade rollback` annotates the rollout's ConfigMap: the upgrade controller takes it.
        if any((obj or {}).get("metadata", {}).get("name") == keys.DRIVER_ROLLOUT_CONFIGMAP for obj in (old, new)):
            wake_upgrade()

    nodes = watching(client, "v1", "Node", transform=slim_node, on_change=node_changed)

    def validator_changed(old: JSON | None, new: JSON | None) -> None:
        if new is not None and is_ready(new) and (old is None or not is_ready(old)) and _tainted(nodes, new):
            wake_reconciler()  # a validated node may carry the startup taint the reconciler lifts
        for pod in (old, new):
            node = nodes.items.get(("", str(((pod or {}).get("spec") or {}).get("nodeName") or "")))
            if node is not None and (node["metadata"].get("labels") or {}).get(GPU.state) in VALIDATORS_NEEDED:
                wake_upgrade()
                return

    return (
        watching(client, "nvidia.com/v1", "ClusterPolicy", on_change=policy_changed),
        watching(client, "nvidia.com/v1alpha1", "NVIDIADriver", on_change=everyone),
        nodes,
        watching(client, "apps/v1", "DaemonSet", namespace=namespace, on_change=daemonset_changed),
        watching(client, "v1", "ConfigMap", namespace=namespace, transform=slim_config_map, on_change=config_changed),
        watching(client, "v1", "Secret", namespace=namespace, transform=slim_metadata, on_change=reconciler),
        watching(client, "apps/v1", "ControllerRevision", namespace=namespace, labels=DRIVER_SELECTOR,
                 on_change=upgrades),
        watching(client, "v1", "Pod", namespace=namespace, labels=DRIVER_SELECTOR, transform=slim_pod,
                 on_change=upgrades),
        watching(client, "v1", "Pod", namespace=namespace, labels=VALIDATOR_SELECTOR, transform=slim_pod,
                 on_change=validator_changed),
        watching(client, "v1", "Event", namespace=EVENT_NAMESPACE, fields=EVENT_FIELDS, transform=slim_event,
                 on_change=event_changed),
        *(
            watching(client, api_version, kind, namespace=namespace if namespaced else None,
                     labels={keys.OPERAND_STATE: None}, transform=slim_metadata, on_change=reconciler)
            for api_version, kind, namespaced in OWNED_KINDS
        ),
    )  # fmt: skip
