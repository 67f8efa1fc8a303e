"""nv-ipam IPPools: the model's field errors, the CRD, the pure per-node block plan, and who writes the status."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpu_operator.api.corev1 import NodeSelector
from gpu_operator.api.network.crd import network_crds
from gpu_operator.api.network.ippool import ExcludeRange, IPPool, free_ranges, parse_address
from gpu_operator.api.validation import validate_document
from gpu_operator.reconcile.network.ippools import upstream_owns_pools
from gpu_operator.render.network import NicNode
from gpu_operator.render.network.ippools import plan_pool, selects

JSON = dict[str, Any]
AGENT = "ghcr.io/example/gpu-operator:v1"


def _pool(spec: JSON, allocations: list[JSON] | None = None) -> IPPool:
    body: JSON = {"metadata": {"name": "pool-a", "namespace": "nvidia-network-operator"}, "spec": spec}
    if allocations is not None:
        body["status"] = {"allocations": allocations}
    return IPPool.model_validate(body)


def _nodes(*names: str, labels: dict[str, str] | None = None) -> list[NicNode]:
    return [NicNode(name=n, labels=labels or {}) for n in names]


def _blocks(pool: IPPool, nodes: list[NicNode]) -> dict[str, tuple[str, str]]:
    return {a.node_name: (a.start_ip, a.end_ip) for a in plan_pool(pool=pool, nodes=nodes).allocations}


def _errors(spec: JSON) -> list[str]:
    """What ``gpu-operator validate`` says about a pool with ``spec``."""
    with pytest.raises(ValidationError):
        _pool(spec)
    doc = {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool", "metadata": {"name": "p"}, "spec": spec}
    return [f"{e.path}: {e.message}" for e in validate_document(doc).errors]


def test_the_crd_is_namespaced_with_upstreams_fields() -> None:
    crd = network_crds()["nv-ipam.nvidia.com_ippools.yaml"]
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == {
        "subnet", "perNodeBlockSize", "exclusions", "gateway", "nodeSelector", "defaultGateway", "routes",
    }  # fmt: skip
    allocation = schema["status"]["properties"]["allocations"]["items"]["properties"]
    assert set(allocation) == {"nodeName", "startIP", "endIP"}
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"subnet": "10.0.0.0/33", "perNodeBlockSize": 4}, "spec.subnet: must be a subnet in CIDR notation"),
        ({"subnet": "10.0.0.0/30", "perNodeBlockSize": 4}, "spec.perNodeBlockSize: is larger than"),
        ({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "gateway": "10.0.1.1"}, "spec.gateway: must be inside"),
        ({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "gateway": "nope"}, "spec.gateway: must be an IP address"),
        ({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "exclusions": [{"startIP": "10.0.0.9", "endIP": "10.0.0.2"}]},
         "spec.exclusions: each must have startIP and endIP inside the subnet"),
        ({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "routes": [{"dst": "fd00::/64"}]},
         "spec.routes: each dst must be a CIDR of the subnet's family"),
        ({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "gateway": "10.0.0.1", "defaultGateway": True,
          "routes": [{"dst": "0.0.0.0/0"}]}, "spec.routes: a default route is not allowed"),
    ],
)  # fmt: skip
def test_invalid_pools_name_the_field(spec: JSON, expected: str) -> None:
    assert any(e.startswith(expected) for e in _errors(spec)), _errors(spec)


def test_block_size_below_two_is_refused() -> None:
    assert any(e.startswith("spec.perNodeBlockSize") for e in _errors({"subnet": "10.0.0.0/24", "perNodeBlockSize": 1}))


def test_blocks_follow_upstreams_layout_lowest_first_by_node_name() -> None:
    pool = _pool({"subnet": "203.0.113.0/24", "perNodeBlockSize": 16})
    assert _blocks(pool, _nodes("b", "a")) == {
        "a": ("203.0.113.1", "203.0.113.16"), "b": ("203.0.113.17", "203.0.113.32"),
    }  # fmt: skip


def test_existing_blocks_are_kept_and_a_freed_block_is_reused() -> None:
    held = [{"nodeName": "c", "startIP": "203.0.113.33", "endIP": "203.0.113.48"},
            {"nodeName": "gone", "startIP": "203.0.113.1", "endIP": "203.0.113.16"}]  # fmt: skip
    pool = _pool({"subnet": "203.0.113.0/24", "perNodeBlockSize": 16}, held)
    assert _blocks(pool, _nodes("c", "d")) == {
        "c": ("203.0.113.33", "203.0.113.48"), "d": ("203.0.113.1", "203.0.113.16"),
    }  # fmt: skip


def test_misaligned_or_resized_blocks_are_reallocated() -> None:
    held = [{"nodeName": "a", "startIP": "10.0.0.3", "endIP": "10.0.0.6"}]
    pool = _pool({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4}, held)
    assert _blocks(pool, _nodes("a")) == {"a": ("10.0.0.1", "10.0.0.4")}


def test_a_node_the_selector_drops_loses_its_block() -> None:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rdma", "operator": "Exists"}]}]}
    held = [{"nodeName": "a", "startIP": "10.0.0.1", "endIP": "10.0.0.4"}]
    pool = _pool({"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "nodeSelector": selector}, held)
    nodes = [NicNode(name="a"), NicNode(name="b", labels={"rdma": "yes"})]
    assert _blocks(pool, nodes) == {"b": ("10.0.0.1", "10.0.0.4")}  # the freed block, lowest again


def test_a_pool_too_small_says_which_nodes_got_nothing() -> None:
    plan = plan_pool(pool=_pool({"subnet": "10.0.0.0/28", "perNodeBlockSize": 4}), nodes=_nodes("a", "b", "c", "d"))
    assert [a.node_name for a in plan.allocations] == ["a", "b", "c"]  # .1-.12; .13-.16 would reach .15
    assert plan.unallocated == ("d",)
    assert plan.status()["allocations"][0] == {"nodeName": "a", "startIP": "10.0.0.1", "endIP": "10.0.0.4"}


def test_a_wholly_excluded_block_is_skipped_and_partial_exclusions_split_the_range() -> None:
    exclusions = [{"startIP": "10.0.0.1", "endIP": "10.0.0.4"}, {"startIP": "10.0.0.8", "endIP": "10.0.0.8"}]
    spec = {"subnet": "10.0.0.0/24", "perNodeBlockSize": 4, "gateway": "10.0.0.6", "exclusions": exclusions}
    assert _blocks(_pool(spec), _nodes("a")) == {"a": ("10.0.0.5", "10.0.0.8")}
    start, end = parse_address("10.0.0.5"), parse_address("10.0.0.8")
    assert start is not None
    assert end is not None
    excluded = [ExcludeRange(start_ip="10.0.0.8", end_ip="10.0.0.8")]
    pieces = free_ranges(start=start, end=end, exclusions=excluded, gateway="10.0.0.6")
    assert [(str(a), str(b)) for a, b in pieces] == [("10.0.0.5", "10.0.0.5"), ("10.0.0.7", "10.0.0.7")]


def test_ipv6_pools_allocate_blocks_too() -> None:
    assert _blocks(_pool({"subnet": "fd00::/120", "perNodeBlockSize": 8}), _nodes("a")) == {"a": ("fd00::1", "fd00::8")}


def test_node_selector_operators() -> None:
    node = NicNode(name="n1", labels={"zone": "a", "cores": "8"})

    def sel(*exprs: JSON, fields: list[JSON] | None = None) -> NodeSelector:
        term: JSON = {"matchExpressions": list(exprs)}
        if fields:
            term["matchFields"] = fields
        return NodeSelector.model_validate({"nodeSelectorTerms": [term]})

    assert selects(None, node)
    assert selects(sel({"key": "zone", "operator": "In", "values": ["a", "b"]}), node)
    assert not selects(sel({"key": "zone", "operator": "NotIn", "values": ["a"]}), node)
    assert selects(sel({"key": "gpu", "operator": "DoesNotExist"}), node)
    assert selects(sel({"key": "cores", "operator": "Gt", "values": ["4"]}), node)
    assert not selects(sel({"key": "cores", "operator": "Lt", "values": ["4"]}), node)
    assert selects(sel(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]), node)
    assert not selects(NodeSelector.model_validate({"nodeSelectorTerms": [{}]}), node)


def _policy(nv_ipam: JSON | None) -> JSON:
    spec: JSON = {"nvIpam": nv_ipam} if nv_ipam is not None else {}
    return {"metadata": {"name": "nic-cluster-policy"}, "spec": spec}


def test_upstreams_controller_owns_the_pools_only_when_the_policy_deploys_it() -> None:
    upstream = {"repository": "nvcr.io/nvidia/mellanox", "image": "nvidia-k8s-ipam", "version": "v0.3.7"}
    ours = {"repository": "ghcr.io/example", "image": "gpu-operator", "version": "v2"}
    assert upstream_owns_pools(_policy(upstream), agent_image=AGENT)
    assert not upstream_owns_pools(_policy(ours), agent_image=AGENT)
    assert not upstream_owns_pools(_policy(None), agent_image=AGENT)
    assert not upstream_owns_pools(None, agent_image=AGENT)
