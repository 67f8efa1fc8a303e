"""`gpu-operator crds apply|delete --operator`: which CRDs each operator's hook acts on, and that the
NetworkAttachmentDefinition CRD -- which Multus installs too, and whose deletion deletes every NAD in the
cluster -- is applied only where absent or ours, never over another installer's, and never deleted.

The cluster is a small in-memory stand-in for lightkube's sync ``Client`` (what the hook's command
uses): CRDs by name, with their field managers, and the objects of each kind.
"""

from __future__ import annotations

from typing import Any

import httpx2 as httpx  # lightkube's HTTP library
import pytest
from click.testing import CliRunner
from lightkube import ApiError
from lightkube.models.meta_v1 import ManagedFieldsEntry, ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from gpu_operator.api.crdsets import GPU, NETWORK, OPERATORS, crd_set
from gpu_operator.api.network.crd import nad_crd
from gpu_operator.cli.main import cli
from gpu_operator.kube import crds as kube_crds
from gpu_operator.kube.api import MacvlanNetworkResource, NADResource, NicClusterPolicyResource
from gpu_operator.kube.crds import FIELD_MANAGER, OBJECTS, foreign_managers, run_crd_action
from gpu_operator.render.crdhooks import crd_hook_rules

NAD_CRD = str(nad_crd()["metadata"]["name"])
IPPOOL_CRD = "ippools.nv-ipam.nvidia.com"  # shared too: upstream's nv-ipam installs it
MELLANOX = (
    "nicclusterpolicies.mellanox.com", "nicnodepolicies.mellanox.com", "macvlannetworks.mellanox.com",
    "hostdevicenetworks.mellanox.com", "ipoibnetworks.mellanox.com",
)  # fmt: skip


def _error(code: int) -> ApiError:
    request = httpx.Request("GET", "https://api.invalid")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": str(code)}
    return ApiError(request=request, response=httpx.Response(code, json=body, request=request))


def _crd(name: str, *managers: str) -> CustomResourceDefinition:
    """A live CRD: Established (the API server's status entry is nobody's), with these field managers."""
    fields = [ManagedFieldsEntry(manager=m, operation="Apply") for m in managers]
    fields.append(ManagedFieldsEntry(manager="kube-apiserver", operation="Update", subresource="status"))
    crd: CustomResourceDefinition = CustomResourceDefinition.from_dict({  # type: ignore[assignment]
        "metadata": {"name": name}, "spec": {"group": "g", "names": {"kind": "K", "plural": "p"}, "scope": "Cluster",
                                             "versions": []},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    })  # fmt: skip
    assert crd.metadata is not None
    crd.metadata.managedFields = fields
    return crd


class Cluster:
    """What the hook's command calls: get/apply/delete of CRDs, list/delete of their objects."""

    def __init__(self, crds: dict[str, CustomResourceDefinition], objects: dict[Any, list[str]] | None = None) -> None:
        self.crds = crds
        self.objects = objects or {}
        self.calls: list[tuple[str, ...]] = []
        self.conflict = False  # another installer creates it between our read and our apply

    def get(self, kind: Any, name: str) -> CustomResourceDefinition:
        assert kind is CustomResourceDefinition
        if name not in self.crds:
            raise _error(404)
        return self.crds[name]

    def apply(self, obj: CustomResourceDefinition, *, field_manager: str, force: bool) -> None:
        assert obj.metadata is not None
        name = str(obj.metadata.name)
        self.calls.append(("apply", name, "force" if force else "no-force"))
        if self.conflict and not force:
            self.crds[name] = _crd(name, "multus")  # theirs, with another schema: a conflict
            raise _error(409)
        self.crds[name] = _crd(name, field_manager)

    def delete(self, kind: Any, name: str, **_options: Any) -> None:
        self.calls.append(("delete", getattr(kind, "__name__", str(kind)), name))
        if kind is CustomResourceDefinition:
            if self.crds.pop(name, None) is None:
                raise _error(404)
            return
        self.objects[kind].remove(name)

    def list(self, kind: Any) -> list[Any]:
        if kind not in self.objects:
            raise _error(404)
        return [type("Obj", (), {"metadata": ObjectMeta(name=n)})() for n in self.objects[kind]]


def _run(cluster: Cluster, action: str, operator: str) -> list[str]:
    return run_crd_action(client=cluster, action=action, timeout=5, operator=operator)  # type: ignore[arg-type]


# --- the sets -----------------------------------------------------------------------------------------


def test_sets_name_each_operators_crds() -> None:
    assert OPERATORS == (GPU, NETWORK)  # gpu first: the default
    assert crd_set().names() == ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com")
    network = crd_set(NETWORK)
    assert network.names() == (*MELLANOX, NAD_CRD, IPPOOL_CRD)
    assert network.shared == frozenset({NAD_CRD, IPPOOL_CRD})
    assert network.deletable() == MELLANOX
    assert [k.kind for k in network.kinds()] == [
        "NicClusterPolicy", "NicNodePolicy", "MacvlanNetwork", "HostDeviceNetwork", "IPoIBNetwork",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="expected one of gpu, network"):
        crd_set("nfd")


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_deletable_crd_has_its_objects_deleted_first(operator: str) -> None:
    # A CRD deleted before its objects leaves their operands behind (kube.crds.delete_crds).
    for name, kind in zip(crd_set(operator).deletable(), crd_set(operator).kinds(), strict=True):
        resource = OBJECTS[name]
        assert (resource._api_info.resource.group, resource._api_info.resource.kind) == (kind.group, kind.kind)


# --- the command line -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "operator"),
    [
        (["apply"], GPU),  # the gpu-operator chart's Jobs pass no --operator
        (["apply", "--operator", "network"], NETWORK),
        (["delete", "--operator=network", "--timeout=240"], NETWORK),
        (["delete", "--operator=gpu"], GPU),
    ],
)
def test_cli_picks_the_set(monkeypatch: pytest.MonkeyPatch, argv: list[str], operator: str) -> None:
    seen: dict[str, Any] = {}

    def fake_run(**kwargs: Any) -> list[str]:
        seen.update(kwargs)
        return ["done"]

    monkeypatch.setattr("gpu_operator.kube.connect.sync_client", lambda **_: object())
    monkeypatch.setattr(kube_crds, "run_crd_action", fake_run)
    result = CliRunner().invoke(cli, ["crds", *argv])
    assert result.exit_code == 0, result.output
    assert (seen["action"], seen["operator"]) == (argv[0], operator)
    assert result.output == "done\n"


def test_cli_refuses_an_unknown_set() -> None:
    result = CliRunner().invoke(cli, ["crds", "apply", "--operator", "nfd"])
    assert result.exit_code == 2
    assert "'gpu', 'network'" in result.output


# --- apply --------------------------------------------------------------------------------------------


def test_apply_gpu_set_touches_no_network_crd() -> None:
    cluster = Cluster({})
    assert _run(cluster, "apply", GPU) == [
        "applied clusterpolicies.nvidia.com (Established)", "applied nvidiadrivers.nvidia.com (Established)",
    ]  # fmt: skip
    assert {c[1] for c in cluster.calls} == set(crd_set().names())


def test_apply_creates_an_absent_nad_crd_without_force() -> None:
    cluster = Cluster({})
    lines = _run(cluster, "apply", NETWORK)
    assert lines == [f"applied {name} (Established)" for name in (*MELLANOX, NAD_CRD, IPPOOL_CRD)]
    assert ("apply", NAD_CRD, "no-force") in cluster.calls
    # The mellanox.com ones are ours.
    assert all(c[2] == "force" for c in cluster.calls if c[1] not in (NAD_CRD, IPPOOL_CRD))


@pytest.mark.parametrize("managers", [("helm",), ("kubectl-client-side-apply", FIELD_MANAGER), ()])
def test_apply_keeps_a_nad_crd_another_installer_manages(managers: tuple[str, ...]) -> None:
    # Multus's (or any chart's crds/, Helm's manager says not whose); one with no manager is not provably ours.
    theirs = _crd(NAD_CRD, *managers)
    cluster = Cluster({NAD_CRD: theirs})
    lines = _run(cluster, "apply", NETWORK)
    assert cluster.crds[NAD_CRD] is theirs
    assert not [c for c in cluster.calls if c[1] == NAD_CRD]
    (line,) = [line for line in lines if NAD_CRD in line]
    assert line.startswith(f"kept {NAD_CRD}: managed by ")


def test_apply_updates_a_nad_crd_only_we_manage() -> None:
    cluster = Cluster({NAD_CRD: _crd(NAD_CRD, FIELD_MANAGER)})
    assert f"applied {NAD_CRD} (Established)" in _run(cluster, "apply", NETWORK)
    assert ("apply", NAD_CRD, "no-force") in cluster.calls


def test_apply_keeps_a_nad_crd_another_installer_created_meanwhile() -> None:
    cluster = Cluster({})
    cluster.conflict = True  # the API server answers our non-forced apply with 409
    lines = _run(cluster, "apply", NETWORK)
    assert f"kept {NAD_CRD}: another installer applied it first" in lines


def test_foreign_managers_ignore_the_status_writer() -> None:
    assert foreign_managers(_crd("x", FIELD_MANAGER)) == []
    assert foreign_managers(_crd("x", "helm", FIELD_MANAGER, "helm")) == ["helm"]
    assert foreign_managers(_crd("x")) == ["(unknown)"]


# --- delete: never the NAD CRD ---------------------------------------------------------------------------


def test_network_delete_never_deletes_the_nad_crd() -> None:
    crds = {name: _crd(name, FIELD_MANAGER) for name in (*MELLANOX, NAD_CRD)}
    objects: dict[Any, list[str]] = {OBJECTS[name]: [] for name in MELLANOX}
    objects[NicClusterPolicyResource] = ["nic-cluster-policy"]
    objects[MacvlanNetworkResource] = ["rdma-net"]
    cluster = Cluster(crds, objects)
    lines = _run(cluster, "delete", NETWORK)
    assert sorted(cluster.crds) == [NAD_CRD]  # the mellanox.com CRDs are gone, the NAD CRD stays
    assert not [c for c in cluster.calls if c[0] == "delete" and NAD_CRD in c]
    assert not [c for c in cluster.calls if c[0] == "delete" and c[1] == NADResource.__name__]
    assert lines == [
        *(f"deleted {n}" for n in MELLANOX),
        f"kept {IPPOOL_CRD}, shared with other installers: never deleted",  # sorted by name
        f"kept {NAD_CRD}, shared with other installers: never deleted",
    ]
    # The policy and the network went first, while their CRDs still existed (their operands go with them).
    order = [c[2] for c in cluster.calls if c[0] == "delete"]
    assert order.index("nic-cluster-policy") < order.index("nicclusterpolicies.mellanox.com")
    assert order.index("rdma-net") < order.index("macvlannetworks.mellanox.com")


def test_network_delete_with_nothing_installed_reports_absent() -> None:
    lines = _run(Cluster({}), "delete", NETWORK)
    assert lines[:-2] == [f"absent {n}" for n in MELLANOX]


def test_gpu_delete_touches_no_network_crd() -> None:
    crds = {name: _crd(name, FIELD_MANAGER) for name in (*crd_set().names(), *MELLANOX, NAD_CRD)}
    cluster = Cluster(crds, {OBJECTS[n]: [] for n in crd_set().names()})
    _run(cluster, "delete", GPU)
    assert sorted(cluster.crds) == sorted((*MELLANOX, NAD_CRD))


def test_the_cleanup_hook_may_not_delete_the_nad_crd() -> None:
    # RBAC holds the line too: the network cleanup hook's role names only the mellanox.com CRDs.
    rules = crd_hook_rules(NETWORK)
    for rule in rules["delete"]:
        assert NAD_CRD not in rule.names
        assert rule.groups != ("k8s.cni.cncf.io",)
        if rule.groups == ("apiextensions.k8s.io",):
            assert rule.names == MELLANOX  # by name: never every CRD
    # Applying may read and patch it (by name), to see whose it is and to create it where absent.
    (named,) = [r for r in rules["apply"] if r.names]
    assert NAD_CRD in named.names
    assert named.verbs == ("get", "patch")
