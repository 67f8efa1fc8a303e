"""RBAC as data: what the operator may do, and what each operand's service account may do.

The operator's rules are the least it needs for what it does:

- nodes: read and patch labels (node labelling, upgrade state); pods: list, delete and evict (driver
  upgrades move GPU pods off a node); DaemonSets cluster-wide: read (the drain skips their pods);
  PodDisruptionBudgets cluster-wide: read (the upgrade controller plans evictions they allow);
- events: create (Events about what it did) and read (light remediation reads the device plugin's
  ``GpuUnhealthy`` Events on Nodes, which name the XID, and its own earlier breaker and dry-run Events;
  a canary rollout's no-new-XID gate reads them too);
- Jobs in its own namespace: create and read (a canary rollout's probe Job on each canary);
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

An operand's account gets the rules of what runs under it (``render.implementations``): our agent's
(:data:`OPERAND_PERMISSIONS`), NVIDIA's image's as NVIDIA's operator grants them
(:data:`NVIDIA_OPERAND_PERMISSIONS`), or both in a mixed pod. The operator holds four rules only to
grant them to NVIDIA's images, and uses none itself:

- nodes ``update``: NVIDIA's driver manager and MIG manager write their node with updates;
- ``resource.k8s.io`` ResourceClaims get, list: NVIDIA's driver manager reads those of pods it evicts;
- pods create, update, patch in its namespace: NVIDIA's validator creates its workload pods there;
- ``nfd.k8s-sigs.io`` NodeFeatures get, list, watch, create, update in its namespace: NVIDIA's GFD
  publishes its labels as a NodeFeature there.

Kubernetes refuses to let the operator grant permissions it does not hold, so its rules must cover
every operand rule; :func:`covers` checks that, and a unit test runs it. The Helm chart's
``templates/rbac.yaml`` is generated from these rules (``hack/generate.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpu_operator.render.implementations import Kind
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
#: The driver and MIG managers and the device plugin record Events about their node (in "default", as
#: the kubelet does).
_NODE_EVENTS = Rule(("",), ("events",), ("create", "patch"))

#: Service account -> what our agents running under it may do. Not listed: an account and no rules.
OPERAND_PERMISSIONS: Mapping[str, Permissions] = MappingProxyType(
    {
        # The driver manager cordons nodes, evicts GPU pods and waits for operand pods to leave.
        "nvidia-driver": Permissions(
            cluster=(_NODE_LABEL, *_POD_REMOVE, Rule(("apps",), ("daemonsets",), READ), _NODE_EVENTS)
        ),
        "nvidia-operator-validator": Permissions(cluster=(_NODE_GET,)),
        # The device plugin and GFD read the node's nvidia.com/device-plugin.config label; the plugin
        # records GpuUnhealthy / GpuRecovered Events about its node.
        "nvidia-device-plugin": Permissions(cluster=(_NODE_READ, _NODE_EVENTS)),
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

#: Service account -> what NVIDIA's operator grants NVIDIA's images under it (§ of
#: ``upstream-operand-contracts.md``), without OpenShift's SCC ``use`` (no SCCs are rendered here).
#: The account names stay ours. Not listed: an account and no rules (DCGM). The reference lists no
#: rules for NVIDIA's sandbox images, so ``render.sandbox`` gives their accounts ours as well.
NVIDIA_OPERAND_PERMISSIONS: Mapping[str, Permissions] = MappingProxyType(
    {
        # §3: k8s-driver-manager cordons its node (nodes patch/update), evicts GPU pods (pods read,
        # pods/eviction), reads their DRA claims and looks up DaemonSets. Not OpenShift's clusterversions
        # read: the OpenShift driver toolkit is not supported here.
        "nvidia-driver": Permissions(
            cluster=(
                Rule(("",), ("nodes",), ("get", "list", "watch", "patch", "update")),
                Rule(("",), ("pods",), READ),
                Rule(("",), ("pods/eviction",), ("create",)),
                Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list")),
                Rule(("apps",), ("daemonsets",), ("get",)),
            )
        ),
        # §5: its driver-validation init (NVIDIA's validator) lists DaemonSets to find the driver's.
        "nvidia-container-toolkit": Permissions(namespaced=(Rule(("apps",), ("daemonsets",), ("list",)),)),
        # §6: plugin-validation reads its node's capacity; the cuda and plugin validations create
        # workload pods here, delete older ones and wait for them; driver-validation reads DaemonSets.
        # The pods copy the DaemonSet's owner reference to the ClusterPolicy, and blocking the owner's
        # deletion takes update on its finalizers (never an NVIDIADriver's: it owns no validator).
        "nvidia-operator-validator": Permissions(
            cluster=(_NODE_READ, Rule(("nvidia.com",), ("clusterpolicies/finalizers",), ("update",))),
            namespaced=(
                Rule(("",), ("pods",), ("create", "get", "list", "watch", "update", "patch", "delete")),
                Rule(("apps",), ("daemonsets",), READ),
            ),
        ),
        # §7: the plugin and its config-manager read the node's nvidia.com/device-plugin.config label.
        "nvidia-device-plugin": Permissions(cluster=(_NODE_READ,)),
        # §8: NVIDIA runs it under the device plugin's account, whose rule this is (its config-manager
        # reads the same label); here it keeps its own account.
        "nvidia-mps-control-daemon": Permissions(cluster=(_NODE_READ,)),
        # §10: the exporter may read its metrics list from a ConfigMap; reading pods is POD_READER.
        "nvidia-dcgm-exporter": Permissions(namespaced=(Rule(("",), ("configmaps",), ("get", "list")),)),
        # §11: GFD publishes its labels as a NodeFeature here, owned by its pod (pods get), and reads
        # its node; it never writes the node.
        "nvidia-gpu-feature-discovery": Permissions(
            cluster=(_NODE_READ,),
            namespaced=(
                Rule(("nfd.k8s-sigs.io",), ("nodefeatures",), ("get", "list", "watch", "create", "update")),
                Rule(("",), ("pods",), ("get",)),
            ),
        ),
        # §12: it writes its node's MIG labels, lists the GPU pods on it, restarts the operand pods here
        # around a reconfiguration and keeps its state in ConfigMaps here.
        "nvidia-mig-manager": Permissions(
            cluster=(
                Rule(("",), ("nodes",), ("get", "list", "watch", "update", "patch")),
                Rule(("",), ("pods",), ("list",)),
            ),
            namespaced=(
                Rule(("",), ("pods",), ("get", "list", "watch", "delete")),
                Rule(("",), ("configmaps",), ("create", "get", "list", "update", "patch")),
            ),
        ),
        # §13 lists no rules: nodes get, as our exporter, for the GPUs the plugin advertised on its node.
        "nvidia-node-status-exporter": Permissions(cluster=(_NODE_GET,)),
    }
)
_BY_KIND: Mapping[Kind, Mapping[str, Permissions]] = MappingProxyType(
    {"agent": OPERAND_PERMISSIONS, "nvidia": NVIDIA_OPERAND_PERMISSIONS}
)
#: Only when the exporter adds pod labels or UIDs to metrics (ours or NVIDIA's).
POD_READER = Permissions(cluster=(Rule(("",), ("pods",), READ),))

#: Cluster-scoped roles and bindings the operator owns (the names it may change or delete).
OPERAND_CLUSTER_ROLES = tuple(
    sorted({sa for perms in _BY_KIND.values() for sa, p in perms.items() if p.cluster} | {EXPORTER_POD_READER})
)
WATCHED_CRDS = (
    "servicemonitors.monitoring.coreos.com",
    "nodefeatures.nfd.k8s-sigs.io",
    "clusterpolicies.nvidia.com",
    "nvidiadrivers.nvidia.com",
)

OPERATOR_CLUSTER_RULES = (
    _NODE_LABEL,
    Rule(("",), ("nodes",), ("update",)),  # only to grant it (NVIDIA's driver and MIG managers)
    *_POD_REMOVE,
    Rule(("apps",), ("daemonsets",), READ),
    Rule(("policy",), ("poddisruptionbudgets",), READ),
    Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list")),  # only to grant it (NVIDIA's driver manager)
    Rule(("",), ("namespaces",), ("get", "patch"), (NAMESPACE_PLACEHOLDER,)),
    Rule(("",), ("events",), ("create", "patch")),
    Rule(("",), ("events",), READ),  # light remediation reads the device plugin's GpuUnhealthy Events
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
    Rule(("",), ("pods",), ("create", "update", "patch")),  # only to grant it (NVIDIA's validator)
    Rule(("",), ("secrets",), READ),
    Rule(("apps",), ("daemonsets",), MANAGE),
    Rule(("apps",), ("controllerrevisions",), READ),
    Rule(("batch",), ("jobs",), ("get", "list", "watch", "create")),  # the canary rollouts' probe Jobs
    Rule(("rbac.authorization.k8s.io",), ("roles", "rolebindings"), MANAGE),
    Rule(("coordination.k8s.io",), ("leases",), ("get", "create", "update", "patch")),
    Rule(("coordination.k8s.io",), ("leases",), ("delete",), (LEADER_LEASE,)),
    Rule(("monitoring.coreos.com",), ("servicemonitors",), MANAGE),
    # Only to grant it (NVIDIA's GFD).
    Rule(("nfd.k8s-sigs.io",), ("nodefeatures",), ("get", "list", "watch", "create", "update")),
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


def _merged(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """``rules`` in order, with the verbs of rules on the same objects joined into the first."""
    verbs: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], dict[str, None]] = {}
    for r in rules:
        verbs.setdefault((r.groups, r.resources, r.names), {}).update(dict.fromkeys(r.verbs))
    return tuple(Rule(groups, resources, tuple(v), names) for (groups, resources, names), v in verbs.items())


def permissions(account: str, implementations: Iterable[Kind]) -> Permissions:
    """What ``account`` may do when ``implementations`` run under it: the rules of each, agent's first."""
    kinds = set(implementations)
    perms = [table.get(account, Permissions()) for kind, table in _BY_KIND.items() if kind in kinds]
    return Permissions(
        cluster=_merged(r for p in perms for r in p.cluster), namespaced=_merged(r for p in perms for r in p.namespaced)
    )


def operand_rbac(
    account: str, *, state: str, namespace: str, implementations: Iterable[Kind], pod_reader: bool = False
) -> list[JSON]:
    """The ServiceAccount of an operand and its roles and bindings (roles share the account's name), for
    what runs under it: ``implementations`` (``agent``, ``nvidia`` or both, ``render.implementations``)."""
    perms = permissions(account, implementations)
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
    """Operand rules of ``scope`` (cluster or namespaced), ours and NVIDIA's, that ``operator`` does not cover."""
    missing = []
    tables = [*_BY_KIND.values(), {EXPORTER_POD_READER: POD_READER}]
    for table in tables:
        for account, perms in table.items():
            for rule in perms.cluster if scope == "cluster" else perms.namespaced:
                if not covers(operator, rule):
                    missing.append((account, rule))
    return missing
