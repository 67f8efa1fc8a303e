"""The network operator's generated RBAC (``render.network_rbac``) against what its states render: the
operator holds every rule of every operand role it creates (Kubernetes refuses to grant more than one
holds), and no grant-only rule outlives the operand rule that needed it."""

from __future__ import annotations

from typing import Any

from gpu_operator.api.network import NicClusterPolicy, NicNodePolicy
from gpu_operator.names import network as net
from gpu_operator.render.network import NicFacts, NicNode, render_cluster_policy, render_node_policy
from gpu_operator.render.network_rbac import (
    GRANT_CLUSTER_RULES,
    OWN_CLUSTER_RULES,
    OWN_NAMESPACE_RULES,
    network_operator_rules,
    rule_of,
    ungrantable,
    unused_grants,
)
from gpu_operator.render.rbac import Rule

NFD = "feature.node.kubernetes.io/"
NODE = NicNode(
    name="nic-1",
    labels={
        net.NIC_PRESENT: "true",
        f"{NFD}system-os_release.ID": "ubuntu",
        f"{NFD}system-os_release.VERSION_ID": "24.04",
        f"{NFD}kernel-version.full": "6.8.0-45-generic",
        net.ARCH: "amd64",
        "pool": "b",
    },
)
FACTS = NicFacts(namespace="nvidia-network-operator", nodes=(NODE,))
IMAGE = {"image": "component"}  # repository and version from global
RDMA_CONFIG = '{"configList": [{"resourceName": "rdma_a", "selectors": {"vendors": ["15b3"]}}]}'
#: Every section of the NicClusterPolicy, so every state renders its objects.
EVERY_SECTION: dict[str, Any] = {
    "global": {"repository": "registry.example/mellanox", "version": "v26.7.0"},
    "ofedDriver": {"image": "doca-driver", "version": "doca3.5.0-26.07-0.7.0.0-0"},
    "rdmaSharedDevicePlugin": {**IMAGE, "config": RDMA_CONFIG},
    "sriovDevicePlugin": {**IMAGE, "config": '{"resourceList": []}'},
    "ibKubernetes": {
        **IMAGE,
        "ufmSecret": "ufm",
        "pKeyGUIDPoolRangeStart": "02:00:00:00:00:00:00:00",
        "pKeyGUIDPoolRangeEnd": "02:FF:FF:FF:FF:FF:FF:FF",
    },
    "secondaryNetwork": {"multus": IMAGE, "cniPlugins": IMAGE, "ipoib": IMAGE},
    "nvIpam": IMAGE,
    "nicFeatureDiscovery": IMAGE,
    "docaTelemetryService": IMAGE,
}
NODE_POLICY: dict[str, Any] = {
    "nodeSelector": {"pool": "b"},
    "ofedDriver": {"image": "doca-driver", "repository": "r.example", "version": "doca3.5.0-26.07-0.7.0.0-0"},
    "rdmaSharedDevicePlugin": {"image": "rdma", "repository": "r.example", "version": "v1", "config": RDMA_CONFIG},
    "sriovDevicePlugin": {"image": "sriov", "repository": "r.example", "version": "v1", "config": "{}"},
}


def rendered_objects() -> list[dict[str, Any]]:
    """Every object the cluster policy with every section and a node policy with its three render."""
    ncp = NicClusterPolicy.model_validate(
        {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": net.NCP_NAME},
         "spec": EVERY_SECTION}
    )  # fmt: skip
    nnp = NicNodePolicy.model_validate(
        {"apiVersion": net.API_VERSION, "kind": net.NNP_KIND, "metadata": {"name": "rack-b"}, "spec": NODE_POLICY}
    )
    states = [*render_cluster_policy(ncp, FACTS), *render_node_policy(nnp, FACTS)]
    assert all(s.enabled and not s.error for s in states), [(s.name, s.error) for s in states]
    return [obj for state in states for obj in state.objects]


def test_every_state_rendered_roles() -> None:
    # The check below is only as good as its input: the operand roles are really there.
    roles = {o["metadata"]["name"] for o in rendered_objects() if o["kind"] == "ClusterRole"}
    assert {"multus", "ib-kubernetes", "nv-ipam-node", "nv-ipam-controller"} <= roles
    assert any(name.startswith("ofed-driver") and name.endswith("rack-b") for name in roles)


def test_operator_holds_every_operand_rule() -> None:
    missing = ungrantable(rendered_objects())
    assert missing == [], "the operator cannot grant these; add them to GRANT_CLUSTER_RULES:\n" + "\n".join(
        f"  {role}: {rule}" for role, rule in missing
    )


def test_no_grant_rule_is_stale() -> None:
    assert unused_grants(rendered_objects()) == []


def test_ungrantable_reports_a_rule_the_operator_lacks() -> None:
    role = {"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [{"apiGroups": [""], "resources": ["secrets"],
            "verbs": ["get"]}]}  # fmt: skip
    assert ungrantable([role]) == [("x", Rule(("",), ("secrets",), ("get",)))]
    # Deployments are held in the operator's namespace only: fine for a Role, not for a ClusterRole.
    deploys = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]
    assert ungrantable([{"kind": "Role", "metadata": {"name": "r"}, "rules": deploys}]) == []
    assert ungrantable([{"kind": "ClusterRole", "metadata": {"name": "c"}, "rules": deploys}]) != []


def test_unused_grants_finds_a_grant_nothing_needs() -> None:
    assert unused_grants([]) == list(GRANT_CLUSTER_RULES)


def test_rules_are_what_the_chart_writes() -> None:
    cluster, namespaced = network_operator_rules()
    assert [rule_of(r) for r in cluster] == [*OWN_CLUSTER_RULES, *GRANT_CLUSTER_RULES]
    assert [rule_of(r) for r in namespaced] == list(OWN_NAMESPACE_RULES)


def test_no_wildcards_and_no_privilege_verbs() -> None:
    cluster, namespaced = network_operator_rules()
    for rule in (*cluster, *namespaced):
        assert "*" not in (*rule["apiGroups"], *rule["resources"], *rule["verbs"])
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    # Secrets are never read (the ib-kubernetes UFM secret is read by its pod, through env).
    assert not any("secrets" in r["resources"] for r in (*cluster, *namespaced))


def test_lease_delete_is_limited_to_the_operators_lease() -> None:
    deletes = [r for r in OWN_NAMESPACE_RULES if "leases" in r.resources and "delete" in r.verbs]
    assert deletes == [Rule(("coordination.k8s.io",), ("leases",), ("delete",), (net.LEASE_NAME,))]
