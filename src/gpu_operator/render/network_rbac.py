"""The Network Operator's RBAC as data: what its own service account may do, one rule per need.

``hack/generate.py`` writes these rules to ``deploy/helm/network-operator/templates/rbac.yaml``
(``render.chart.network_rbac_template``); a golden test fails when the file drifts. The chart's
service account is bound to exactly these rules, so what the operator calls must fit them.

Each rule is a :class:`Need` with the reason it exists (printed above it in the chart). Two kinds:

- :data:`OWN_CLUSTER` / :data:`OWN_NAMESPACE`: what the reconciler, the OFED upgrade controller and
  the leader election call themselves;
- :data:`GRANT_CLUSTER`: rules the operator never uses, held only because it creates the operands'
  ClusterRoles (``render.network``: Multus, the OFED driver, ib-kubernetes, the nv-ipam node agent
  and controller) and Kubernetes refuses to let anyone grant what it does not hold. No ``escalate``
  or ``bind``: those would let the operator grant anything. A unit test renders every state and
  checks both ways (:func:`ungrantable`, :func:`unused_grants`): every operand rule is covered, and
  every grant rule is still needed.

Cluster-scoped operand roles cannot be limited by name: a NicNodePolicy's OFED driver gets its own
``ofed-driver-<policy>`` ClusterRole, so ``clusterroles`` and ``clusterrolebindings`` are managed
without ``resourceNames`` (the operator can still only put into them what it holds itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_operator.names import network as net
from gpu_operator.render.meta import JSON
from gpu_operator.render.rbac import MANAGE, READ, Rule, covers

#: The five mellanox.com resources the operator watches (NicClusterPolicy, NicNodePolicy, the networks).
KINDS = ("nicclusterpolicies", "nicnodepolicies", "macvlannetworks", "hostdevicenetworks", "ipoibnetworks")
NAD_GROUP = net.NAD_API_VERSION.split("/")[0]
NAD_RESOURCE = "network-attachment-definitions"
NAD_CRD = f"{NAD_RESOURCE}.{NAD_GROUP}"
RBAC_GROUP = "rbac.authorization.k8s.io"
NV_IPAM_GROUP = "nv-ipam.nvidia.com"
NV_IPAM_POOLS = ("ippools", "cidrpools")
IPPOOL_CRD = f"ippools.{NV_IPAM_GROUP}"


@dataclass(frozen=True)
class Need:
    """One rule and why the operator holds it (the chart's rbac.yaml prints ``why`` above the rule)."""

    why: str
    rule: Rule


OWN_CLUSTER: tuple[Need, ...] = (
    Need("informers on the policies and networks (all cluster-scoped)", Rule((net.GROUP,), KINDS, READ)),
    Need(
        "status: state, reason, appliedStates, conditions; a network's NAD name",
        Rule((net.GROUP,), tuple(f"{k}/status" for k in KINDS), ("get", "patch", "update")),
    ),
    Need(
        "owner references with blockOwnerDeletion to a policy or network (OwnerReferencesPermissionEnforcement)",
        Rule((net.GROUP,), tuple(f"{k}/finalizers" for k in KINDS), ("update",)),
    ),
    Need(
        "each network's NetworkAttachmentDefinition in its networkNamespace: read, applied, deleted",
        Rule((NAD_GROUP,), (NAD_RESOURCE,), MANAGE),
    ),
    Need(
        "whether the NAD CRD (a network's status names it when it is not) and the IPPool CRD are installed",
        Rule(("apiextensions.k8s.io",), ("customresourcedefinitions",), ("get",), (NAD_CRD, IPPOOL_CRD)),
    ),
    Need(
        "node informer (NFD labels and taints: OFED pools); mofed.wait label; upgrade labels, cordon (merge patch)",
        Rule(("",), ("nodes",), ("get", "list", "watch", "patch")),
    ),
    Need(
        "OFED pod readiness (mofed.wait); upgrade: pods on a drained node, old OFED pod deleted, users restarted",
        Rule(("",), ("pods",), ("get", "list", "watch", "delete")),
    ),
    Need(
        "upgrade drain through the Eviction API (PodDisruptionBudgets apply)",
        Rule(("",), ("pods/eviction",), ("create",)),
    ),
    Need("upgrade: the budgets, to plan evictions they allow", Rule(("policy",), ("poddisruptionbudgets",), ("list",))),
    Need("Events about policies, networks and nodes (v1)", Rule(("",), ("events",), ("create",))),
    Need(
        "operand ClusterRoles and bindings: listed by state label, applied, pruned; no resourceNames: a"
        " NicNodePolicy's OFED role is named after it",
        Rule((RBAC_GROUP,), ("clusterroles", "clusterrolebindings"), MANAGE),
    ),
)

OWN_NAMESPACE: tuple[Need, ...] = (
    Need(
        "the states' node DaemonSets and controller Deployments", Rule(("apps",), ("daemonsets", "deployments"), MANAGE)
    ),
    Need(
        "the states' ConfigMaps (plugin configs), Services and ServiceAccounts",
        Rule(("",), ("configmaps", "services", "serviceaccounts"), MANAGE),
    ),
    Need("listed to prune; applied if a state renders one", Rule((RBAC_GROUP,), ("roles", "rolebindings"), MANAGE)),
    # watch too: the operator keeps the OFED ControllerRevisions in an informer (reconcile.network.operator);
    # without it every watch was refused (403) and the cache fell back to listing again and again.
    Need(
        "upgrade: an OFED pod's revision against its OnDelete DaemonSet's newest (informer)",
        Rule(("apps",), ("controllerrevisions",), READ),
    ),
    Need("nv-ipam IPPools in its namespace (informer): the blocks to plan", Rule((NV_IPAM_GROUP,), ("ippools",), READ)),
    Need(
        "each IPPool's status.allocations (when upstream's nv-ipam controller is not deployed)",
        Rule((NV_IPAM_GROUP,), ("ippools/status",), ("get", "patch", "update")),
    ),
    Need(
        "leader election: create (not limitable by name) and renew its Lease",
        Rule(("coordination.k8s.io",), ("leases",), ("get", "create", "update", "patch")),
    ),
    Need(
        "leader election: release its Lease at once on stop (by name only)",
        Rule(("coordination.k8s.io",), ("leases",), ("delete",), (net.LEASE_NAME,)),
    ),
)

GRANT_CLUSTER: tuple[Need, ...] = (
    Need("only to grant: the OFED and nv-ipam controller roles update nodes", Rule(("",), ("nodes",), ("update",))),
    Need(
        "only to grant: Multus updates pods, ib-kubernetes patches them (annotations)",
        Rule(("",), ("pods",), ("update", "patch")),
    ),
    Need("only to grant: Multus's pods/status rule", Rule(("",), ("pods/status",), ("get", "list", "watch", "update"))),
    Need("only to grant: Multus and nv-ipam write Events", Rule(("",), ("events",), ("patch", "update"))),
    Need(
        "only to grant: Multus writes Events (events.k8s.io)",
        Rule(("events.k8s.io",), ("events",), ("create", "patch", "update")),
    ),
    Need(
        "only to grant: the OFED role reads ConfigMaps; nv-ipam's controller reads and deletes them",
        Rule(("",), ("configmaps",), ("get", "list", "watch", "delete")),
    ),
    Need(
        "only to grant: ib-kubernetes and nv-ipam's controller elect a leader (ClusterRole Leases)",
        Rule(("coordination.k8s.io",), ("leases",), ("get", "list", "watch", "create", "update", "patch", "delete")),
    ),
    Need(
        "only to grant: nv-ipam's node agent reads the pools, its controller creates them",
        Rule((NV_IPAM_GROUP,), NV_IPAM_POOLS, ("get", "list", "watch", "create")),
    ),
    Need(
        "only to grant: nv-ipam's controller writes the pools' status",
        Rule((NV_IPAM_GROUP,), tuple(f"{p}/status" for p in NV_IPAM_POOLS), ("get", "update", "patch")),
    ),
)

OWN_CLUSTER_RULES = tuple(n.rule for n in OWN_CLUSTER)
OWN_NAMESPACE_RULES = tuple(n.rule for n in OWN_NAMESPACE)
GRANT_CLUSTER_RULES = tuple(n.rule for n in GRANT_CLUSTER)


def network_operator_needs() -> tuple[tuple[Need, ...], tuple[Need, ...]]:
    """The (ClusterRole, Role) rules with their reasons, in the order the chart writes them."""
    return (*OWN_CLUSTER, *GRANT_CLUSTER), OWN_NAMESPACE


def network_operator_rules() -> tuple[list[JSON], list[JSON]]:
    """The network operator's (ClusterRole rules, Role rules in its namespace), as the chart writes them."""
    cluster, namespaced = network_operator_needs()
    return [n.rule.as_dict() for n in cluster], [n.rule.as_dict() for n in namespaced]


def rule_of(data: Mapping[str, Any]) -> Rule:
    """A :class:`Rule` from a role's rule as the API spells it."""
    return Rule(
        tuple(data.get("apiGroups") or ()),
        tuple(data.get("resources") or ()),
        tuple(data.get("verbs") or ()),
        tuple(data.get("resourceNames") or ()),
    )


def _role_rules(objects: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, bool, Rule]]:
    """(role name, cluster-scoped?, rule) of every ClusterRole and Role among ``objects``."""
    for obj in objects:
        if obj.get("kind") in ("ClusterRole", "Role"):
            for data in obj.get("rules") or ():
                yield obj["metadata"]["name"], obj["kind"] == "ClusterRole", rule_of(data)


def ungrantable(objects: Iterable[Mapping[str, Any]]) -> list[tuple[str, Rule]]:
    """(role, rule) of each operand rule among ``objects`` that the operator does not hold, so the API
    server would refuse to create its role. A Role's rule may be covered by the namespace rules too."""
    missing = []
    for name, cluster_scoped, needed in _role_rules(objects):
        held = (*OWN_CLUSTER_RULES, *GRANT_CLUSTER_RULES) + (() if cluster_scoped else OWN_NAMESPACE_RULES)
        if not covers(held, needed):
            missing.append((name, needed))
    return missing


def unused_grants(objects: Iterable[Mapping[str, Any]]) -> list[Rule]:
    """The grant-only rules with a part (group, resource, verb) that no operand rule among ``objects``
    needs: stale, to narrow or drop."""
    granted = [rule for _name, _scope, rule in _role_rules(objects)]
    return [
        grant
        for grant in GRANT_CLUSTER_RULES
        if not all(
            covers(granted, Rule((group,), (resource,), (verb,)))
            for group in grant.groups
            for resource in grant.resources
            for verb in grant.verbs
        )
    ]
