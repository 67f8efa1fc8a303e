"""The OFED driver's upgrade policies: the NicClusterPolicy and each NicNodePolicy, read from their JSON.

The Network Operator drives OFED upgrades with the same state machine as the GPU driver (upstream:
k8s-operator-libs with ``SetDriverName("ofed")``). Its knobs are ``spec.ofedDriver.upgradePolicy`` of
the NicClusterPolicy named ``nic-cluster-policy`` (partition ``""``) and of each NicNodePolicy
(partition: its name). Upstream's translation (``api/v1alpha1/utils.go``) applies:

- ``autoUpgrade``, ``maxParallelUpgrades`` (default 1, 0 = unlimited); no ``maxUnavailable`` (no cap);
- no pod-deletion step: after ``waitForCompletion`` the node goes to drain;
- ``drain`` {enable, force, podSelector, timeoutSeconds (300), deleteEmptyDir}, its pod selector with
  ``nvidia.com/ofed-driver-upgrade-drain.skip!=true`` appended, so the operator never evicts itself;
- no validator: the node moves on once its new OFED pod is Ready.

``safeLoad`` needs the OFED pod's init container to set the safe-load annotation and wait; that
container is not rendered yet (it comes with the OFED agent), so today the setting has no effect. The
controller already honours the annotation for every driver. The policies come as the API returns them;
the upgrade policy is read with its API model (``api.network.components``), so defaults match the CRD.
:func:`node_partition` says which NicNodePolicy a node follows while its driver pod is gone (its
nodeSelector matches; the reconciler rejects overlapping ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_operator.api.network.components import DriverUpgradePolicySpec
from gpu_operator.names import network
from gpu_operator.names.keys import upgrade_keys
from gpu_operator.names.selectors import parse_selector
from gpu_operator.upgrade.drivers import CLUSTER_POLICY, OFED_DRIVER
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS, Knobs

JSON = dict[str, Any]
OFED_KEYS = upgrade_keys(OFED_DRIVER)
#: Appended to every OFED drain selector (upstream): pods labelled so are never drained.
DRAIN_SKIP_SELECTOR = f"{OFED_KEYS.drain_skip}!=true"
DEFAULT_DRAIN_TIMEOUT = 300


def drain_selector_text(pod_selector: str | None) -> str:
    """The drain pod selector as upstream passes it on: the user's, then the drain-skip exclusion."""
    return ",".join(part for part in ((pod_selector or "").strip(), DRAIN_SKIP_SELECTOR) if part)


def ofed_knobs(
    policy: DriverUpgradePolicySpec | Mapping[str, Any] | None, *, max_driver_restarts: int = MAX_DRIVER_RESTARTS
) -> Knobs:
    """Knobs from an ``ofedDriver.upgradePolicy`` (the model, or its JSON as stored); None or
    ``autoUpgrade`` off: off. The JSON is read with the API model, so defaults are the CRD's (a
    ``drain`` object drains unless ``enable: false``). A malformed policy raises ValueError (pydantic's
    ValidationError, or a SelectorError naming the selector field)."""
    if policy is None:
        return Knobs(auto_upgrade=False)
    spec = policy if isinstance(policy, DriverUpgradePolicySpec) else DriverUpgradePolicySpec.model_validate(policy)
    if not spec.auto_upgrade:
        return Knobs(auto_upgrade=False)
    wait, drain = spec.wait_for_completion, spec.drain
    drain_text = drain_selector_text(drain.pod_selector if drain is not None else None)
    return Knobs(
        auto_upgrade=True,
        max_parallel=spec.max_parallel_upgrades,
        max_unavailable=None,  # upstream's translation sets none: no cap
        wait_selector=parse_selector(wait.pod_selector, field="waitForCompletion.podSelector") if wait else None,
        wait_timeout=float(wait.timeout_seconds) if wait else 0.0,
        pod_deletion=False,
        drain_enable=bool(drain and drain.enable),
        drain_force=bool(drain and drain.force),
        drain_selector=parse_selector(drain_text, field="drain.podSelector"),
        drain_timeout=float(drain.timeout_seconds) if drain else float(DEFAULT_DRAIN_TIMEOUT),
        drain_empty_dir=bool(drain and drain.delete_empty_dir),
        validation=False,
        max_driver_restarts=max_driver_restarts,
    )


def upgrade_policy(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.ofedDriver.upgradePolicy`` of a NicClusterPolicy or NicNodePolicy (None when absent)."""
    ofed = (doc.get("spec") or {}).get("ofedDriver") or {}
    policy = ofed.get("upgradePolicy") if isinstance(ofed, Mapping) else None
    return policy if isinstance(policy, Mapping) else None


def policy_knobs(
    *, cluster_policies: Sequence[JSON], node_policies: Sequence[JSON], max_driver_restarts: int
) -> dict[str, Knobs | str]:
    """Partition -> its knobs, or why its policy cannot be used: ``""`` for the NicClusterPolicy named
    ``nic-cluster-policy`` (others are ignored, as the reconciler ignores them), each NicNodePolicy by name."""
    out: dict[str, Knobs | str] = {CLUSTER_POLICY: Knobs(auto_upgrade=False)}
    for doc in cluster_policies:
        if doc["metadata"]["name"] == network.NCP_NAME:
            out[CLUSTER_POLICY] = _knobs_or_error(doc, max_driver_restarts=max_driver_restarts)
    for doc in node_policies:
        out[doc["metadata"]["name"]] = _knobs_or_error(doc, max_driver_restarts=max_driver_restarts)
    return out


def _knobs_or_error(doc: JSON, *, max_driver_restarts: int) -> Knobs | str:
    try:
        return ofed_knobs(upgrade_policy(doc), max_driver_restarts=max_driver_restarts)
    except ValueError as error:  # SelectorError included
        return f"{doc['kind']} {doc['metadata']['name']} ofedDriver.upgradePolicy: {error}"


def node_partition(node_policies: Sequence[JSON]) -> Callable[[JSON], str]:
    """The partition of a node whose OFED pod is gone: the first NicNodePolicy (by name) whose
    ``nodeSelector`` matches its labels, else the NicClusterPolicy's."""
    selectors = sorted(
        (doc["metadata"]["name"], dict((doc.get("spec") or {}).get("nodeSelector") or {}))
        for doc in node_policies
        if (doc.get("spec") or {}).get("ofedDriver") is not None  # only these run OFED DaemonSets of their own
    )

    def partition(node: JSON) -> str:
        labels = node["metadata"].get("labels") or {}
        for name, wanted in selectors:
            if wanted and all(labels.get(k) == v for k, v in wanted.items()):
                return str(name)
        return CLUSTER_POLICY

    return partition
