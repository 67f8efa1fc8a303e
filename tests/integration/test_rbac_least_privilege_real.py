"""Least privilege, proven against a real RBAC authorizer: the operator's and every operand's ServiceAccount,
with the Roles and ClusterRoles the operator renders applied to a real API server, are allowed each thing
their rules name and refused a list of what none of them may do (SubjectAccessReview answers both).

Cluster-scoped objects get the test namespace as a suffix so the test never touches another's roles.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.render import OperatorSettings, facts_from_nodes, node_info, render
from gpu_operator.render.rbac import operator_rules
from tests.conftest import REPO

INPUTS = REPO / "tests" / "golden" / "data" / "render" / "inputs"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
OPERATOR = "gpu-operator"
#: (verb, group, resource, subresource, cluster-wide): what no operand may do.
NO_OPERAND = (
    ("get", "", "secrets", "", False),
    ("list", "", "secrets", "", True),
    ("create", "", "pods", "exec", False),
    ("delete", "", "nodes", "", True),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", True),
    ("escalate", "rbac.authorization.k8s.io", "roles", "", False),
    ("impersonate", "", "users", "", True),
    ("create", "", "serviceaccounts", "token", False),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", True),
)
#: What the operator may not do either, although it manages operands.
NO_OPERATOR = (
    ("create", "", "secrets", "", False),
    ("delete", "", "secrets", "", False),
    ("list", "", "secrets", "", True),
    ("create", "", "pods", "exec", False),
    ("delete", "", "nodes", "", True),
    ("delete", "", "namespaces", "", True),
    ("impersonate", "", "users", "", True),
    ("create", "", "serviceaccounts", "token", False),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", True),
)


def _rendered_rbac(namespace: str) -> list[dict[str, Any]]:
    policy = ClusterPolicy.model_validate(yaml.safe_load((INPUTS / "all-enabled.yaml").read_text(encoding="utf-8")))
    nodes = [node_info(n) for n in yaml.safe_load((INPUTS / "nodes.yaml").read_text(encoding="utf-8"))["items"]]
    facts = facts_from_nodes(nodes, namespace=namespace, precompiled=False, has_service_monitor_crd=True)
    objects = [o for s in render(policy, facts, operator=OperatorSettings(agent_image="x")) for o in s.objects]
    return [o for o in objects if o["kind"] in RBAC_KINDS]


def _operator_rbac(namespace: str) -> list[dict[str, Any]]:
    cluster, local = operator_rules(namespace=namespace)
    subject = [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": namespace}]
    group = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": OPERATOR, "namespace": namespace}},
        {"apiVersion": group, "kind": "ClusterRole", "metadata": {"name": OPERATOR}, "rules": cluster},
        {"apiVersion": group, "kind": "Role", "metadata": {"name": OPERATOR, "namespace": namespace}, "rules": local},
        {
            "apiVersion": group, "kind": "ClusterRoleBinding", "metadata": {"name": OPERATOR}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR},
        },
        {
            "apiVersion": group, "kind": "RoleBinding", "metadata": {"name": OPERATOR, "namespace": namespace},
            "subjects": subject, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": OPERATOR},
        },
    ]  # fmt: skip


def _isolated(objects: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """Cluster-scoped names (and the bindings' references to them) suffixed, so tests never share them."""
    for obj in objects:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"]["name"] += f"-{suffix}"
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding") and obj["roleRef"]["kind"] == "ClusterRole":
            obj["roleRef"]["name"] += f"-{suffix}"
    return objects


@pytest.fixture
def applied(client: Client, namespace: str) -> Iterator[list[dict[str, Any]]]:
    objects = _isolated(_rendered_rbac(namespace) + _operator_rbac(namespace), namespace)
    for obj in objects:
        client.apply(from_dict(obj), force=True)
    try:
        yield objects
    finally:
        for obj in objects:
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                client.delete(
                    ClusterRole if obj["kind"] == "ClusterRole" else ClusterRoleBinding, obj["metadata"]["name"]
                )


def _allowed(client: Client, *, namespace: str, account: str, check: tuple[str, str, str, str, str | None]) -> bool:
    verb, group, resource, name, where = check
    review = SubjectAccessReview(
        spec=SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resourceAttributes=ResourceAttributes(
                verb=verb, group=group, resource=resource.split("/")[0],
                subresource=resource.split("/")[1] if "/" in resource else None, name=name or None, namespace=where,
            ),
        )
    )  # fmt: skip
    status = client.create(review).status
    return bool(status and status.allowed)


def _granted(objects: list[dict[str, Any]], namespace: str) -> dict[str, list[tuple[str, str, str, str, str | None]]]:
    """Account -> every (verb, group, resource, name, namespace or None) its bound rules name."""
    roles = {
        (o["kind"], o["metadata"]["name"]): o.get("rules") or []
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    out: dict[str, list[tuple[str, str, str, str, str | None]]] = {}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        where = namespace if binding["kind"] == "RoleBinding" else None
        for subject in binding.get("subjects") or []:
            for rule in roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]), []):
                out.setdefault(subject["name"], []).extend(
                    (verb, group, resource, name, where)
                    for group in rule["apiGroups"]
                    for resource in rule["resources"]
                    for verb in rule["verbs"]
                    for name in rule.get("resourceNames") or [""]
                )
    return out


def test_every_account_may_do_what_its_rules_name(
    client: Client, namespace: str, applied: list[dict[str, Any]]
) -> None:
    granted = _granted(applied, namespace)
    assert OPERATOR in granted
    assert len(granted) >= 8, sorted(granted)  # the operator and the operands' accounts
    refused = [
        (account, check)
        for account, checks in granted.items()
        for check in checks
        if not _allowed(client, namespace=namespace, account=account, check=check)
    ]
    assert refused == []


def _check(
    verb: str, group: str, resource: str, sub: str, cluster: bool, namespace: str
) -> tuple[str, str, str, str, str | None]:
    return (verb, group, f"{resource}/{sub}" if sub else resource, "", None if cluster else namespace)


def test_no_operand_may_read_secrets_exec_delete_nodes_or_escalate(
    client: Client, namespace: str, applied: list[dict[str, Any]]
) -> None:
    accounts = sorted(
        o["metadata"]["name"] for o in applied if o["kind"] == "ServiceAccount" and o["metadata"]["name"] != OPERATOR
    )
    assert len(accounts) >= 8, accounts
    allowed = [
        (account, forbidden)
        for forbidden in NO_OPERAND
        for account in accounts
        if _allowed(client, namespace=namespace, account=account, check=_check(*forbidden, namespace))
    ]
    assert allowed == []


def test_the_operator_may_not_touch_secrets_exec_or_delete_nodes(
    client: Client, namespace: str, applied: list[dict[str, Any]]
) -> None:
    allowed = [
        forbidden
        for forbidden in NO_OPERATOR
        if _allowed(client, namespace=namespace, account=OPERATOR, check=_check(*forbidden, namespace))
    ]
    assert allowed == []


def test_only_the_operator_may_watch_node_events(client: Client, namespace: str, applied: list[dict[str, Any]]) -> None:
    """Light remediation reads the device plugin's GpuUnhealthy Events in ``default``; no operand reads Events."""
    for verb in ("get", "list", "watch"):
        assert _allowed(client, namespace=namespace, account=OPERATOR, check=(verb, "", "events", "", "default"))
    accounts = sorted(
        o["metadata"]["name"] for o in applied if o["kind"] == "ServiceAccount" and o["metadata"]["name"] != OPERATOR
    )
    readers = [a for a in accounts if _allowed(client, namespace=namespace, account=a,
                                               check=("list", "", "events", "", "default"))]  # fmt: skip
    assert readers == []
