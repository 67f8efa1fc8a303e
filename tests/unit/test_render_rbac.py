"""RBAC as data: the operator holds every permission it grants (Kubernetes forbids escalation), its
rules stay narrow, and each operand gets only its own account's roles."""

from __future__ import annotations

import pytest

from gpu_operator.render.rbac import (
    NVIDIA_OPERAND_PERMISSIONS,
    OPERAND_CLUSTER_ROLES,
    OPERAND_PERMISSIONS,
    OPERATOR_CLUSTER_RULES,
    OPERATOR_NAMESPACE_RULES,
    Rule,
    covers,
    operand_rbac,
    operator_rules,
    uncovered,
)


def test_operator_covers_every_operand_rule() -> None:
    assert uncovered(OPERATOR_CLUSTER_RULES, scope="cluster") == []
    # Namespaced operand roles live in the operator namespace, where cluster rules apply too.
    assert uncovered((*OPERATOR_NAMESPACE_RULES, *OPERATOR_CLUSTER_RULES), scope="namespaced") == []


def test_covers() -> None:
    granted = [Rule(("",), ("nodes",), ("get", "patch")), Rule(("rbac.authorization.k8s.io",), ("clusterroles",),
               ("delete",), ("a",))]  # fmt: skip
    assert covers(granted, Rule(("",), ("nodes",), ("get",)))
    assert not covers(granted, Rule(("",), ("nodes",), ("delete",)))
    assert covers(granted, Rule(("rbac.authorization.k8s.io",), ("clusterroles",), ("delete",), ("a",)))
    assert not covers(granted, Rule(("rbac.authorization.k8s.io",), ("clusterroles",), ("delete",)))


def _allows(rules: tuple[Rule, ...], group: str, resource: str, verb: str, name: str = "") -> bool:
    return covers(rules, Rule((group,), (resource,), (verb,), (name,) if name else ()))


@pytest.mark.parametrize(
    ("group", "resource", "verb", "name"),
    [
        ("", "secrets", "get", ""),  # no cluster-wide Secrets
        ("", "nodes", "delete", ""),
        ("rbac.authorization.k8s.io", "clusterroles", "patch", "cluster-admin"),
        ("rbac.authorization.k8s.io", "clusterroles", "escalate", ""),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "bind", ""),
        ("", "namespaces", "patch", "kube-system"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "create", ""),
        ("apps", "daemonsets", "delete", ""),  # only in its own namespace (the Role)
        ("", "pods", "create", ""),
    ],
)
def test_operator_cannot(group: str, resource: str, verb: str, name: str) -> None:
    assert not _allows(OPERATOR_CLUSTER_RULES, group, resource, verb, name)


def test_operator_can_manage_its_operands_cluster_roles_by_name() -> None:
    for name in OPERAND_CLUSTER_ROLES:
        assert _allows(OPERATOR_CLUSTER_RULES, "rbac.authorization.k8s.io", "clusterroles", "patch", name)
        assert _allows(OPERATOR_CLUSTER_RULES, "rbac.authorization.k8s.io", "clusterrolebindings", "delete", name)


def test_namespace_placeholder_is_filled_in() -> None:
    cluster, namespaced = operator_rules(namespace="gpu-operator")
    ns_rule = next(r for r in cluster if r["resources"] == ["namespaces"])
    assert ns_rule["resourceNames"] == ["gpu-operator"]
    assert any(r["resources"] == ["secrets"] and r["verbs"] == ["get", "list", "watch"] for r in namespaced)


def test_operand_rbac_objects() -> None:
    objects = operand_rbac("nvidia-mig-manager", state="state-mig-manager", namespace="ns", implementations=("agent",))
    kinds = [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects]
    assert kinds == [
        ("ServiceAccount", "nvidia-mig-manager", "ns"),
        ("ClusterRole", "nvidia-mig-manager", None),
        ("ClusterRoleBinding", "nvidia-mig-manager", None),
        ("Role", "nvidia-mig-manager", "ns"),
        ("RoleBinding", "nvidia-mig-manager", "ns"),
    ]
    assert objects[2]["subjects"] == [{"kind": "ServiceAccount", "name": "nvidia-mig-manager", "namespace": "ns"}]
    # An operand with no API needs gets an account and nothing else.
    toolkit = operand_rbac("nvidia-container-toolkit", state="s", namespace="ns", implementations=("agent",))
    assert [o["kind"] for o in toolkit] == ["ServiceAccount"]
    # NVIDIA's toolkit DaemonSet runs NVIDIA's driver validation, which lists DaemonSets (a Role).
    nvidia = operand_rbac("nvidia-container-toolkit", state="s", namespace="ns", implementations=("nvidia",))
    assert [o["kind"] for o in nvidia] == ["ServiceAccount", "Role", "RoleBinding"]
    assert nvidia[1]["rules"] == [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list"]}]


def test_every_operand_with_cluster_rules_has_a_managed_name() -> None:
    assert {a for a, p in OPERAND_PERMISSIONS.items() if p.cluster} <= set(OPERAND_CLUSTER_ROLES)
    assert {a for a, p in NVIDIA_OPERAND_PERMISSIONS.items() if p.cluster} <= set(OPERAND_CLUSTER_ROLES)


@pytest.mark.parametrize("account", ["nvidia-driver", "nvidia-mig-manager", "nvidia-device-plugin"])
def test_the_agents_that_record_node_events_may_create_them(account: str) -> None:
    # They post Events about their node in "default" (kube/nodecluster.py; the plugin's GpuUnhealthy and
    # GpuRecovered); on a real node the API server answered 403 until their roles allowed it.
    granted = OPERAND_PERMISSIONS[account].cluster
    assert covers(granted, Rule(("",), ("events",), ("create",)))
    gfd = OPERAND_PERMISSIONS["nvidia-gpu-feature-discovery"].cluster
    assert not covers(gfd, Rule(("",), ("events",), ("create",)))
