"""nv-ipam delegates on the node: ``"ipam": {"type": "nv-ipam"}`` handed to host-local with this node's block
(``agents.multus.nvipam``), and the agent reading the pools (``service``) with a fake API."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.multus.delegates import DelegateError
from gpu_operator.agents.multus.nvipam import DATA_DIR, STORE, pools_of, with_pool_ipam
from gpu_operator.agents.multus.service import MultusService
from gpu_operator.kubelet.allocation import PodDevices

JSON = dict[str, Any]
NODE = "node-1"
POOL_NS = "nvidia-network-operator"


def _pool(name: str = "pool-a", **spec: Any) -> JSON:
    allocations = [{"nodeName": "node-0", "startIP": "203.0.113.1", "endIP": "203.0.113.16"},
                   {"nodeName": NODE, "startIP": "203.0.113.17", "endIP": "203.0.113.32"}]  # fmt: skip
    return {"metadata": {"name": name, "namespace": POOL_NS},
            "spec": {"subnet": "203.0.113.0/24", "perNodeBlockSize": 16, **spec},
            "status": {"allocations": allocations}}  # fmt: skip


def _conf(**ipam: Any) -> JSON:
    return {"cniVersion": "1.0.0", "name": "mv", "type": "macvlan", "ipam": {"type": "nv-ipam", **ipam}}


def test_the_nodes_block_becomes_a_host_local_range_with_routes() -> None:
    pool = _pool(gateway="203.0.113.254", defaultGateway=True, routes=[{"dst": "198.51.100.0/24"}])
    conf = with_pool_ipam(_conf(poolName="pool-a"), pools={"pool-a": pool}, node=NODE, where="w")
    assert conf["name"] == STORE  # host-local's store: <dataDir>/nv-ipam, shared by every pool's networks
    assert conf["ipam"] == {
        "type": "host-local", "dataDir": DATA_DIR,
        "ranges": [[{"subnet": "203.0.113.0/24", "rangeStart": "203.0.113.17", "rangeEnd": "203.0.113.32",
                     "gateway": "203.0.113.254"}]],
        "routes": [{"dst": "198.51.100.0/24", "gw": "203.0.113.254"}, {"dst": "0.0.0.0/0", "gw": "203.0.113.254"}],
    }  # fmt: skip


def test_exclusions_split_the_block_and_two_pools_give_two_range_sets() -> None:
    v4 = _pool(exclusions=[{"startIP": "203.0.113.20", "endIP": "203.0.113.29"}])
    v6 = {"metadata": {"name": "pool-6", "namespace": POOL_NS}, "spec": {"subnet": "fd00::/120", "perNodeBlockSize": 8},
          "status": {"allocations": [{"nodeName": NODE, "startIP": "fd00::9", "endIP": "fd00::10"}]}}  # fmt: skip
    conf = {"cniVersion": "1.0.0", "name": "net", "plugins": [
        {"type": "macvlan", "ipam": {"type": "nv-ipam", "poolName": "pool-a,pool-6"}}, {"type": "tuning"}]}  # fmt: skip
    assert pools_of(conf, where="w") == ["pool-a", "pool-6"]
    out = with_pool_ipam(conf, pools={"pool-a": v4, "pool-6": v6}, node=NODE, where="w")
    ranges = out["plugins"][0]["ipam"]["ranges"]
    assert [(r["rangeStart"], r["rangeEnd"]) for r in ranges[0]] == [
        ("203.0.113.17", "203.0.113.19"), ("203.0.113.30", "203.0.113.32"),
    ]  # fmt: skip
    assert ranges[1] == [{"subnet": "fd00::/120", "rangeStart": "fd00::9", "rangeEnd": "fd00::10"}]
    assert out["name"] == STORE
    assert out["plugins"][1] == {"type": "tuning"}


def test_pool_name_defaults_to_the_network_name_and_other_ipams_are_left_alone() -> None:
    assert pools_of(_conf(), where="w") == ["mv"]
    plain = {"cniVersion": "1.0.0", "name": "x", "type": "macvlan", "ipam": {"type": "host-local"}}
    assert pools_of(plain, where="w") == []
    assert with_pool_ipam(dict(plain), pools={}, node=NODE, where="w") == plain


@pytest.mark.parametrize(
    ("conf", "pools", "expected"),
    [
        (_conf(poolName="pool-a"), {"pool-a": None}, "IPPool pool-a (ipam poolName) does not exist"),
        (_conf(poolName="pool-a"), {"pool-a": {**_pool(), "status": {}}},
         f"IPPool {POOL_NS}/pool-a has no block for node {NODE}"),
        (_conf(poolName="a,b,c"), {}, "must name one or two pools"),
        (_conf(poolName="c", poolType="CIDRPool"), {}, "poolType cidrpool is not supported"),
        (_conf(poolName="pool-a,pool-b"), {"pool-a": _pool(), "pool-b": _pool("pool-b")},
         "ipam poolName names two IPv4 pools (pool-a, pool-b): one pool per IP family"),
        (_conf(poolName="pool-a, pool-a"), {"pool-a": _pool()}, "names pool pool-a twice"),
    ],
)  # fmt: skip
def test_errors_name_the_pool_and_the_node(conf: JSON, pools: Mapping[str, JSON | None], expected: str) -> None:
    with pytest.raises(DelegateError, match=re.escape(expected)):
        with_pool_ipam(conf, pools=pools, node=NODE, where="pod team/p: NetworkAttachmentDefinition team/mv")


def _v6(name: str = "pool-6") -> JSON:
    return {"metadata": {"name": name, "namespace": POOL_NS}, "spec": {"subnet": "fd00::/120", "perNodeBlockSize": 8},
            "status": {"allocations": [{"nodeName": NODE, "startIP": "fd00::9", "endIP": "fd00::10"}]}}  # fmt: skip


@pytest.mark.parametrize("pool_names", ["pool-a", "pool-a,pool-6", "pool-6,pool-a", "pool-6"])
def test_every_network_on_a_pool_shares_one_store_whatever_it_pairs_the_pool_with(pool_names: str) -> None:
    # host-local's store is <dataDir>/<conf name>: were it the NAD's pool list, a NAD on pool-a alone and one
    # on pool-a,pool-6 would allocate pool-a's block from two stores and give two pods the same address.
    pools = {"pool-a": _pool(), "pool-6": _v6()}
    out = with_pool_ipam(_conf(poolName=pool_names), pools=pools, node=NODE, where="w")
    assert (out["name"], out["ipam"]["dataDir"]) == (STORE, DATA_DIR)
    assert len(out["ipam"]["ranges"]) == len(pool_names.split(","))


class FakeApi:
    def __init__(self, nads: Mapping[str, JSON], pools: Mapping[str, JSON]) -> None:
        self.nads, self.pools = dict(nads), dict(pools)
        self.pool_reads: list[str] = []

    async def pod(self, *, namespace: str, name: str) -> JSON | None:
        annotations = {"k8s.v1.cni.cncf.io/networks": ", ".join(n.split("/")[1] for n in self.nads)}
        return {"metadata": {"name": name, "namespace": namespace, "uid": "u1", "annotations": annotations}}

    async def nad(self, *, namespace: str, name: str) -> JSON | None:
        return self.nads.get(f"{namespace}/{name}")

    async def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        return None

    async def ippool(self, *, namespace: str, name: str) -> JSON | None:
        self.pool_reads.append(f"{namespace}/{name}")
        return self.pools.get(f"{namespace}/{name}")


def _service(api: FakeApi, tmp_path: Path, *, pools: bool = True) -> MultusService:
    async def pod_resources() -> Sequence[PodDevices]:
        return []

    return MultusService(api=api, pod_resources=pod_resources, host_path=lambda p: tmp_path / p.lstrip("/"),
                         pools=api if pools else None, node_name=NODE, pool_namespace=POOL_NS)  # fmt: skip


def _nad(name: str, config: JSON) -> JSON:
    return {"metadata": {"name": name, "namespace": "team"}, "spec": {"config": json.dumps(config)}}


def test_the_agent_reads_each_pool_once_from_its_namespace(tmp_path: Path) -> None:
    nads = {"team/mv": _nad("mv", _conf(poolName="pool-a")), "team/mv2": _nad("mv2", _conf(poolName="pool-a"))}
    api = FakeApi(nads, {f"{POOL_NS}/pool-a": _pool()})
    answer = asyncio.run(_service(api, tmp_path).handle({"op": "delegates", "namespace": "team", "name": "p"}))
    assert api.pool_reads == [f"{POOL_NS}/pool-a"]
    first, second = answer["delegates"]
    assert first["conf"]["ipam"]["ranges"] == second["conf"]["ipam"]["ranges"]
    assert first["network"] == "team/mv"
    assert first["conf"]["ipam"]["ranges"][0][0]["rangeStart"] == "203.0.113.17"


def test_a_missing_block_is_the_cni_error(tmp_path: Path) -> None:
    api = FakeApi({"team/mv": _nad("mv", _conf(poolName="pool-a"))}, {})
    answer = asyncio.run(_service(api, tmp_path).handle({"op": "delegates", "namespace": "team", "name": "p"}))
    assert answer == {"error": "pod team/p: NetworkAttachmentDefinition team/mv: IPPool pool-a (ipam poolName) "
                               "does not exist"}  # fmt: skip
    no_pools = asyncio.run(_service(api, tmp_path, pools=False).handle({"op": "delegates", "namespace": "team",
                                                                        "name": "p"}))  # fmt: skip
    assert "this agent reads no IPPools" in no_pools["error"]
