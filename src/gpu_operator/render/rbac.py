"""RBAC as data: what the operator may do, and what each operand's service account may do.

The operator's rules are the least it needs for what it does:

- nodes: read and patch labels (node labelling, upgrade state); pods: list, delete and evict (driver
  upgrades move GPU pods off a node); DaemonSets cluster-wide: read (the drain skips their pods);
  PodDisruptionBudgets cluster-wide: read (the upgrade controller plans evictions they allow);
- its own namespace (a Role): the objects it renders (ConfigMaps, Services, ServiceAccounts,
  DaemonSets, Roles and bindings, ServiceMonitors), ControllerRevisions to judge OnDelete readiness,
  Leases for leader election, and Secrets read-only (to report a missing pull or licensing Secret);
- cluster-scoped objects it renders: RuntimeClasses, and the operands' ClusterRoles and bindings,
  which it may change or delete **by name only** (creation cannot be limited by name in RBAC);
- its namespace object, by name, to set the Pod Security labels (``psa.enabled``);
- CRDs by name, to see whether ServiceMonitors and NFD's NodeFeatures exist; its own resources and their
  status;
- its leader-election Lease: create (not limitable by name) and renew, and delete by name only, to hand
  leadership over at once when it stops.

Kubernetes refuses to let the operator grant permissions it does not hold, so its rules must cover
every operand rule; :func:`covers` checks that, and a unit test runs it. The Helm chart's
``templates/rbac.yaml`` is generated from these rules (``hack/generate.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpu_operator.render.meta import JSON, binding, role, service_account

READ = ("get", "list", "watch")
MANAGE = ("get", "list", "watch", "create", "patch", "update", "delete")
#: Stands for the operator's namespace in rules; the chart generator turns it into a template value.
NAMESPACE_PLACEHOLDER = "__OPERATOR_NAMESPACE__"
EXPORTER_POD_READER = "nvidia-dcgm-exporter-read-pods"
#: The operator's leader-election Lease (upstream's name; ``gpu_operator.reconcile.operator.LEASE_NAME``).
LEADER_LEASE = "53822513.nvidia.com"


@dataclass(frozen=True)
class Rule:
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()

    def as_dict(self) -> JSON:
        out: JSON = {"apiGroups": list(self.groups), "resources": list(self.resources)}
        if self.names:
            out["resourceNames"] = list(self.names)
        out["verbs"] = list(self.verbs)
        return out


@dataclass(frozen=True)
class Permissions:
    cluster: tuple[Rule, ...] = ()
    namespaced: tuple[Rule, ...] = ()


_NODE_GET = Rule(("",), ("nodes",), ("get",))
_NODE_READ = Rule(("",), ("nodes",), READ)
_NODE_LABEL = Rule(("",), ("nodes",), ("get", "list", "watch", "patch"))
_POD_REMOVE = (Rule(("",), ("pods",), ("get", "list", "watch", "delete")), Rule(("",), ("pods/eviction",), ("create",)))
#: The driver and MIG managers record Events about their node (in "default", as the kubelet does).
_NODE_EVENTS = Rule(("",), ("events",), ("create", "patch"))

#: Service account -> what it may do. Operands not listed get a service account and no rules.
OPERAND_PERMISSIONS: Mapping[str, Permissions] = MappingProxyType(
    {
        # The driver manager cordons nodes, evicts GPU pods and waits for operand pods to leave.
        "nvidia-driver": Permissions(
            cluster=(_NODE_LABEL, *_POD_REMOVE, Rule(("apps",), ("daemonsets",), READ), _NODE_EVENTS)
        ),
        "nvidia-operator-validator": Permissions(cluster=(_NODE_GET,)),
        # The device plugin and GFD read the node's nvidia.com/device-plugin.config label.
        "nvidia-device-plugin": Permissions(cluster=(_NODE_READ,)),
        "nvidia-mps-control-daemon": Permissions(cluster=(_NODE_GET,)),
        # Without NFD, GPU discovery labels its node nvidia.com/gpu.discovered.
        "nvidia-gpu-discovery": Permissions(cluster=(_NODE_LABEL,)),
        # GFD labels its node itself when NFD is not installed.
        "nvidia-gpu-feature-discovery": Permissions(cluster=(_NODE_LABEL,)),
        "nvidia-mig-manager": Permissions(
            cluster=(_NODE_LABEL, *_POD_REMOVE, _NODE_EVENTS),
            namespaced=(Rule(("",), ("configmaps",), ("get", "list", "watch", "create", "patch", "update")),),
        ),
        "nvidia-node-status-exporter": Permissions(cluster=(_NODE_GET,)),
        "nvidia-vgpu-manager": Permissions(cluster=(_NODE_LABEL,)),
        "nvidia-vgpu-device-manager": Permissions(
            cluster=(_NODE_LABEL,), namespaced=(Rule(("",), ("configmaps",), READ),)
        ),
        "nvidia-sandbox-validator": Permissions(cluster=(_NODE_GET,)),
        "nvidia-vfio-manager": Permissions(cluster=(_NODE_LABEL,)),
        "nvidia-sandbox-device-plugin": Permissions(cluster=(_NODE_GET,)),
        "nvidia-kata-sandbox-device-plugin": Permissions(cluster=(_NODE_GET,)),
        "nvidia-cc-manager": Permissions(cluster=(_NODE_LABEL,)),
    }
)
#: Only when the exporter adds pod labels or UIDs to metrics.
POD_READER = Permissions(cluster=(Rule(("",), ("pods",), READ),))

#: Cluster-scoped roles and bindings the operator owns (the names it may change or delete).
OPERAND_CLUSTER_ROLES = tuple(
    sorted([sa for sa, p in OPERAND_PERMISSIONS.items() if p.cluster] + [EXPORTER_POD_READER])
)
WATCHED_CRDS = (
    "servicemonitors.monitoring.coreos.com",
    "nodefeatures.nfd.k8s-sigs.io",
    "clusterpolicies.nvidia.com",
    "nvidiadrivers.nvidia.com",
)

OPERATOR_CLUSTER_RULES = (
    _NODE_LABEL,
    *_POD_REMOVE,
    Rule(("apps",), ("daemonsets",), READ),
    Rule(("policy",), ("poddisruptionbudgets",), READ),
    Rule(("",), ("namespaces",), ("get", "patch"), (NAMESPACE_PLACEHOLDER,)),
    Rule(("",), ("events",), ("create", "patch")),
    Rule(("events.k8s.io",), ("events",), ("create", "patch")),
    Rule(("node.k8s.io",), ("runtimeclasses",), MANAGE),
    Rule(("rbac.authorization.k8s.io",), ("clusterroles", "clusterrolebindings"), ("list", "watch", "create")),
    Rule(
        ("rbac.authorization.k8s.io",),
        ("clusterroles", "clusterrolebindings"),
        ("get", "patch", "update", "delete"),
        OPERAND_CLUSTER_ROLES,
    ),
    Rule(("apiextensions.k8s.io",), ("customresourcedefinitions",), ("get",), WATCHED_CRDS),
    Rule(("nvidia.com",), ("clusterpolicies", "nvidiadrivers"), ("get", "list", "watch", "patch", "update")),
    Rule(("nvidia.com",), ("clusterpolicies/status", "nvidiadrivers/status"), ("get", "patch", "update")),
    Rule(("nvidia.com",), ("clusterpolicies/finalizers", "nvidiadrivers/finalizers"), ("update",)),
)

OPERATOR_NAMESPACE_RULES = (
    Rule(("",), ("configmaps", "services", "serviceaccounts"), MANAGE),
    Rule(("",), ("secrets",), READ),
    Rule(("apps",), ("daemonsets",), MANAGE),
    Rule(("apps",), ("controllerrevisions",), READ),
    Rule(("rbac.authorization.k8s.io",), ("roles", "rolebindings"), MANAGE),
    Rule(("coordination.k8s.io",), ("leases",), ("get", "create", "update", "patch")),
    Rule(("coordination.k8s.io",), ("leases",), ("delete",), (LEADER_LEASE,)),
    Rule(("monitoring.coreos.com",), ("servicemonitors",), MANAGE),
)


def covers(granted: Iterable[Rule], needed: Rule) -> bool:
    """Whether ``granted`` allows every (group, resource, verb[, name]) of ``needed``."""
    rules = list(granted)
    for group in needed.groups:
        for resource in needed.resources:
            for verb in needed.verbs:
                for name in needed.names or ("",):
                    if not any(
                        group in r.groups
                        and resource in r.resources
                        and verb in r.verbs
                        and (not r.names or (name and name in r.names))
                        for r in rules
                    ):
                        return False
    return True


def operator_rules(*, namespace: str = NAMESPACE_PLACEHOLDER) -> tuple[list[JSON], list[JSON]]:
    """The operator's (ClusterRole rules, Role rules) with its namespace filled in."""
    cluster = []
    for rule in OPERATOR_CLUSTER_RULES:
        data = rule.as_dict()
        if "resourceNames" in data:
            data["resourceNames"] = [namespace if n == NAMESPACE_PLACEHOLDER else n for n in data["resourceNames"]]
        cluster.append(data)
    return cluster, [r.as_dict() for r in OPERATOR_NAMESPACE_RULES]


def operand_rbac(account: str, *, state: str, namespace: str, pod_reader: bool = False) -> list[JSON]:
    """The ServiceAccount of an operand and its roles and bindings (roles share the account's name)."""
    perms = OPERAND_PERMISSIONS.get(account, Permissions())
    objects = [service_account(account, state=state, namespace=namespace)]
    if perms.cluster:
        objects.append(role(account, state=state, rules=[r.as_dict() for r in perms.cluster], namespace=None))
        objects.append(binding(account, state=state, service_account=account, sa_namespace=namespace, namespace=None))
    if perms.namespaced:
        objects.append(role(account, state=state, rules=[r.as_dict() for r in perms.namespaced], namespace=namespace))
        objects.append(
            binding(account, state=state, service_account=account, sa_namespace=namespace, namespace=namespace)
        )
    if pod_reader:
        rules = [r.as_dict() for r in POD_READER.cluster]
        objects.append(role(EXPORTER_POD_READER, state=state, rules=rules, namespace=None))
        objects.append(
            binding(EXPORTER_POD_READER, state=state, service_account=account, sa_namespace=namespace, namespace=None)
        )
    return objects


def uncovered(operator: Sequence[Rule], *, scope: str) -> list[tuple[str, Rule]]:
    """Operand rules of ``scope`` (cluster or namespaced) that ``operator`` does not cover."""
    missing = []
    extra = {EXPORTER_POD_READER: POD_READER}
    for account, perms in {**OPERAND_PERMISSIONS, **extra}.items():
        for rule in perms.cluster if scope == "cluster" else perms.namespaced:
            if not covers(operator, rule):
                missing.append((account, rule))
    return missing
