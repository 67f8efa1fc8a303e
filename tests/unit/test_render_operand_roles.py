"""Operand roles follow the implementation that runs under each account: our agents' rules, or what
NVIDIA's operator grants NVIDIA's image (reference ``upstream-operand-contracts.md``, per operand),
and the operator holds every rule it may grant."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.render import ClusterFacts, OperatorSettings, render
from gpu_operator.render.facts import NodeInfo
from gpu_operator.render.implementations import Kind
from gpu_operator.render.nvidiadriver import render_drivers
from gpu_operator.render.rbac import (
    NVIDIA_OPERAND_PERMISSIONS,
    OPERAND_CLUSTER_ROLES,
    OPERAND_PERMISSIONS,
    OPERATOR_CLUSTER_RULES,
    OPERATOR_NAMESPACE_RULES,
    Rule,
    covers,
    permissions,
)

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
NS = "gpu-operator"
FACTS = ClusterFacts(namespace=NS, gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True, nfd_installed=True)
OPERATOR = OperatorSettings(agent_image=AGENT)
ON = {"dcgm": {"enabled": True}, "nodeStatusExporter": {"enabled": True}}


def _image(repository: str, image: str, version: str, **extra: Any) -> dict[str, Any]:
    return {"repository": repository, "image": image, "version": version, **extra}


NVIDIA_IMAGES: dict[str, Any] = {
    "driver": _image("nvcr.io/nvidia", "driver", "595.91.07",
                     manager=_image("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.9.1")),
    "toolkit": _image("nvcr.io/nvidia/k8s", "container-toolkit", "v1.18.0"),
    "devicePlugin": _image("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
    "dcgm": _image("nvcr.io/nvidia/cloud-native", "dcgm", "4.3.1-1-ubuntu22.04", enabled=True),
    "dcgmExporter": _image("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.3.1-4.4.0-ubuntu22.04"),
    "gfd": _image("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
    "migManager": _image("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.12.3-ubuntu20.04"),
    "nodeStatusExporter": _image("nvcr.io/nvidia", "gpu-operator", "v26.7.0", enabled=True),
    "validator": _image("nvcr.io/nvidia", "gpu-operator", "v26.7.0"),
}  # fmt: skip

Grants = frozenset[tuple[str, str, str]]


def grants(*entries: tuple[str, str, str]) -> Grants:
    """(group, resource, "verb verb ...") entries as one (group, resource, verb) triple per verb."""
    return frozenset((g, r, v) for g, r, verbs in entries for v in verbs.split())


def _triples(rules: list[dict[str, Any]]) -> Grants:
    assert all("resourceNames" not in r for r in rules), "operand rules are never limited by name"
    return frozenset((g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"])


def _objects(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    out = {}
    for state in render(policy, FACTS, operator=OPERATOR):
        for obj in state.objects:
            out[(obj["kind"], obj["metadata"]["name"])] = obj
    return out


def roles(spec: dict[str, Any], account: str) -> tuple[Grants, Grants]:
    """The (ClusterRole, Role) grants rendered for ``account``; empty when the role is not rendered."""
    objects = _objects(spec)
    assert ("ServiceAccount", account) in objects
    cluster = objects.get(("ClusterRole", account))
    namespaced = objects.get(("Role", account))
    if namespaced is not None:
        assert namespaced["metadata"]["namespace"] == NS
        binding = objects[("RoleBinding", account)]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NS}]
    if cluster is not None:
        assert objects[("ClusterRoleBinding", account)]["roleRef"]["name"] == account
    return (
        _triples(cluster["rules"]) if cluster else frozenset(),
        _triples(namespaced["rules"]) if namespaced else frozenset(),
    )


NODE_READ = ("", "nodes", "get list watch")
#: account -> (ClusterRole, Role) NVIDIA's operator grants its image, less OpenShift's SCC use.
NVIDIA_EXPECTED: dict[str, tuple[Grants, Grants]] = {
    "nvidia-driver": (
        grants(("", "nodes", "get list watch patch update"), ("", "pods", "get list watch"),
               ("", "pods/eviction", "create"), ("resource.k8s.io", "resourceclaims", "get list"),
               ("apps", "daemonsets", "get")),
        grants(),
    ),
    "nvidia-container-toolkit": (grants(), grants(("apps", "daemonsets", "list"))),
    "nvidia-operator-validator": (
        grants(NODE_READ, ("nvidia.com", "clusterpolicies/finalizers", "update")),
        grants(("", "pods", "create get list watch update patch delete"), ("apps", "daemonsets", "get list watch")),
    ),
    "nvidia-device-plugin": (grants(NODE_READ), grants()),
    "nvidia-mps-control-daemon": (grants(NODE_READ), grants()),
    "nvidia-dcgm": (grants(), grants()),
    "nvidia-dcgm-exporter": (grants(), grants(("", "configmaps", "get list"))),
    "nvidia-gpu-feature-discovery": (
        grants(NODE_READ),
        grants(("nfd.k8s-sigs.io", "nodefeatures", "get list watch create update"), ("", "pods", "get")),
    ),
    "nvidia-mig-manager": (
        grants(("", "nodes", "get list watch update patch"), ("", "pods", "list")),
        grants(("", "pods", "get list watch delete"), ("", "configmaps", "create get list update patch")),
    ),
    "nvidia-node-status-exporter": (grants(("", "nodes", "get")), grants()),
}  # fmt: skip


@pytest.mark.parametrize("account", sorted(NVIDIA_EXPECTED))
def test_nvidia_images_get_what_nvidias_operator_grants_them(account: str) -> None:
    assert roles(NVIDIA_IMAGES, account) == NVIDIA_EXPECTED[account]


def _rules_of(perms_rules: tuple[Rule, ...]) -> Grants:
    return _triples([r.as_dict() for r in perms_rules])


@pytest.mark.parametrize("account", sorted(set(NVIDIA_EXPECTED) - {"nvidia-dcgm"}))  # no DCGM agent: refused
def test_our_agents_keep_their_own_rules(account: str) -> None:
    agent = OPERAND_PERMISSIONS.get(account)
    expected = (_rules_of(agent.cluster), _rules_of(agent.namespaced)) if agent else (frozenset(), frozenset())
    assert roles(ON, account) == expected


def test_gfd_writes_node_features_only_as_nvidias_image() -> None:
    nodefeatures = ("nfd.k8s-sigs.io", "nodefeatures", "create")
    nvidia_cluster, nvidia_ns = roles({"gfd": NVIDIA_IMAGES["gfd"]}, "nvidia-gpu-feature-discovery")
    assert nodefeatures in nvidia_ns
    assert ("nfd.k8s-sigs.io", "nodefeatures", "update") in nvidia_ns
    assert ("", "nodes", "patch") not in nvidia_cluster  # NVIDIA's GFD never labels the node itself
    agent_cluster, agent_ns = roles({}, "nvidia-gpu-feature-discovery")
    assert agent_ns == frozenset()  # no Role at all
    assert ("", "nodes", "patch") in agent_cluster  # ours labels its node without NFD's API
    # Our own image named explicitly is still our agent.
    ours = {"repository": "ghcr.io/gpu-operator-py", "image": "gpu-operator", "version": "v0.2.0"}
    assert roles({"gfd": ours}, "nvidia-gpu-feature-discovery")[1] == frozenset()
    # Forced either way by the section's implementation.
    assert nodefeatures in roles({"gfd": {"implementation": "nvidia"}}, "nvidia-gpu-feature-discovery")[1]
    forced_agent = {**NVIDIA_IMAGES["gfd"], "implementation": "agent"}
    assert roles({"gfd": forced_agent}, "nvidia-gpu-feature-discovery")[1] == frozenset()


def test_validator_creates_workload_pods_only_as_nvidias_image() -> None:
    create = ("", "pods", "create")
    assert create in roles({"validator": NVIDIA_IMAGES["validator"]}, "nvidia-operator-validator")[1]
    assert roles({}, "nvidia-operator-validator") == (grants(("", "nodes", "get")), frozenset())


def test_nvidia_driver_with_our_manager_gets_both_rule_sets() -> None:
    driver = {k: v for k, v in NVIDIA_IMAGES["driver"].items() if k != "manager"}
    cluster, namespaced = roles({"driver": driver}, "nvidia-driver")
    agent = _rules_of(OPERAND_PERMISSIONS["nvidia-driver"].cluster)
    assert cluster == agent | NVIDIA_EXPECTED["nvidia-driver"][0]
    assert namespaced == frozenset()
    # Our driver keeps ours: no update on nodes, no DRA claims.
    assert roles({}, "nvidia-driver") == (agent, frozenset())
    assert ("", "nodes", "update") not in agent


def test_nvidia_exporter_reads_pods_with_pod_metadata() -> None:
    spec = {"dcgmExporter": {**NVIDIA_IMAGES["dcgmExporter"], "enablePodLabels": True}}
    objects = _objects(spec)
    reader = objects[("ClusterRole", "nvidia-dcgm-exporter-read-pods")]
    assert _triples(reader["rules"]) == grants(("", "pods", "get list watch"))
    assert _triples(objects[("Role", "nvidia-dcgm-exporter")]["rules"]) == grants(("", "configmaps", "get list"))
    assert ("ClusterRole", "nvidia-dcgm-exporter-read-pods") not in _objects(
        {"dcgmExporter": NVIDIA_IMAGES["dcgmExporter"]}
    )


def _driver(name: str, **spec: Any) -> NVIDIADriver:
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return NVIDIADriver.model_validate({"metadata": meta, "spec": spec})


def _shared_driver_rules(*drivers: NVIDIADriver) -> Grants:
    node = NodeInfo(name="a", labels={"nvidia.com/gpu.present": "true",
                                      "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                                      "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"})  # fmt: skip
    facts = ClusterFacts(namespace=NS, gpu_node_count=1)
    result = render_drivers(list(drivers), [node], policy=None, facts=facts, operator=OPERATOR)
    (role,) = [o for o in result.shared if o["kind"] == "ClusterRole"]
    assert role["metadata"]["name"] == "nvidia-driver"
    return _triples(role["rules"])


def test_nvidiadriver_account_has_the_rules_of_every_live_driver() -> None:
    manager = {"repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-driver-manager", "version": "v0.9.1"}
    nvidia = _driver("default", default=True, repository="nvcr.io/nvidia", image="driver", version="595.91.07",
                     manager=manager)  # fmt: skip
    ours = _driver("ours", repository="ghcr.io/gpu-operator-py", image="gpu-operator", version="v0.1.0",
                   nodeSelector={"pool": "ours"})  # fmt: skip
    agent = _rules_of(OPERAND_PERMISSIONS["nvidia-driver"].cluster)
    assert _shared_driver_rules(nvidia) == NVIDIA_EXPECTED["nvidia-driver"][0]
    assert _shared_driver_rules(ours) == agent
    assert _shared_driver_rules(nvidia, ours) == agent | NVIDIA_EXPECTED["nvidia-driver"][0]


def _all_rendered_rules(spec: dict[str, Any]) -> list[tuple[str, Rule]]:
    out = []
    for (kind, _), obj in _objects(spec).items():
        if kind in ("ClusterRole", "Role"):
            for r in obj["rules"]:
                out.append((kind, Rule(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]))))
    return out


@pytest.mark.parametrize("spec", [NVIDIA_IMAGES, ON], ids=["nvidia", "agent"])
def test_operator_holds_every_rendered_operand_rule(spec: dict[str, Any]) -> None:
    rendered = _all_rendered_rules(spec)
    assert rendered
    namespaced_scope = (*OPERATOR_NAMESPACE_RULES, *OPERATOR_CLUSTER_RULES)
    for kind, rule in rendered:
        assert covers(OPERATOR_CLUSTER_RULES if kind == "ClusterRole" else namespaced_scope, rule), (kind, rule)


KIND_SETS: list[tuple[Kind, ...]] = [("agent",), ("nvidia",), ("agent", "nvidia")]


@pytest.mark.parametrize("kinds", KIND_SETS, ids=["+".join(k) for k in KIND_SETS])
def test_operator_covers_the_union_for_every_account(kinds: tuple[Kind, ...]) -> None:
    for account in {*OPERAND_PERMISSIONS, *NVIDIA_OPERAND_PERMISSIONS}:
        perms = permissions(account, kinds)
        for rule in perms.cluster:
            assert covers(OPERATOR_CLUSTER_RULES, rule), (account, rule)
        for rule in perms.namespaced:
            assert covers((*OPERATOR_NAMESPACE_RULES, *OPERATOR_CLUSTER_RULES), rule), (account, rule)
        if perms.cluster:
            assert account in OPERAND_CLUSTER_ROLES  # the operator may change or delete its ClusterRole


def test_union_merges_verbs_on_the_same_objects() -> None:
    perms = permissions("nvidia-mig-manager", ("agent", "nvidia"))
    nodes = [r for r in perms.cluster if r.resources == ("nodes",)]
    assert len(nodes) == 1
    assert set(nodes[0].verbs) == {"get", "list", "watch", "patch", "update"}
    assert permissions("nvidia-mig-manager", ()) == permissions("nvidia-dcgm", ("agent", "nvidia"))
    # Order-independent, and a generator is read once.
    assert permissions("nvidia-driver", iter(("nvidia", "agent"))) == permissions("nvidia-driver", ("agent", "nvidia"))
    assert list(itertools.chain(permissions("nvidia-dcgm", ("nvidia",)).cluster)) == []


def test_nvidia_only_permissions_need_new_operator_rules() -> None:
    # The four rules the operator holds only to grant NVIDIA's images: without them, covers() fails.
    needed = [
        (Rule(("",), ("nodes",), ("update",)), "cluster"),
        (Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list")), "cluster"),
        (Rule(("",), ("pods",), ("create", "update", "patch")), "namespaced"),
        (Rule(("nfd.k8s-sigs.io",), ("nodefeatures",), ("get", "list", "watch", "create", "update")), "namespaced"),
    ]
    for rule, scope in needed:
        held = OPERATOR_CLUSTER_RULES if scope == "cluster" else (*OPERATOR_NAMESPACE_RULES, *OPERATOR_CLUSTER_RULES)
        assert covers(held, rule)
        assert not covers([r for r in held if r != rule], rule)
