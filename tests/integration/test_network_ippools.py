"""nv-ipam IPPools on the real API server: the network operator (in a thread) writes each pool's blocks.

Fake nodes labelled for this test only (the session's cluster has other nodes); the pool selects them
by that label. Blocks are stable, a deleted node's block goes to the next new node, a pool too small
leaves a node without one (and says so in an Event), and an invalid pool holds no blocks.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event

from gpu_operator.kube.api import IPPoolResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.reconcile.network.operator import NetworkOperatorThread
from tests.integration.conftest import FakeNodeFactory

JSON = dict[str, Any]
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
LABEL = f"ippool-test-{secrets.token_hex(3)}"


@pytest.fixture
def pools_operator(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[NetworkOperatorThread]:
    manifests = {}
    for path in sorted([*CRDS.glob("mellanox.com_*.yaml"), *CRDS.glob("nv-ipam.nvidia.com_*.yaml")]):
        body = yaml.safe_load(path.read_text())
        manifests[body["metadata"]["name"]] = body
    install_crds(client=client, manifests=manifests)
    with NetworkOperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace) as op:
        yield op


def _create_pool(client: Client, namespace: str, name: str, spec: JSON) -> None:
    body = {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip
    client.create(codecs.from_dict(body))


def _blocks(client: Client, namespace: str, name: str) -> dict[str, tuple[str, str]] | None:
    pool: JSON = client.get(IPPoolResource, name, namespace=namespace).to_dict()  # type: ignore[no-untyped-call]
    status = pool.get("status")
    if status is None:
        return None
    return {a["nodeName"]: (a["startIP"], a["endIP"]) for a in status.get("allocations") or ()}


def _selector() -> JSON:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": LABEL, "operator": "Exists"}]}]}


@pytest.mark.timeout(180)
def test_the_operator_writes_stable_blocks_and_reuses_freed_ones(
    pools_operator: NetworkOperatorThread, client: Client, namespace: str, fake_node: FakeNodeFactory
) -> None:
    began = time.monotonic()
    a = fake_node(name=f"{LABEL}-a", labels={LABEL: ""})
    b = fake_node(name=f"{LABEL}-b", labels={LABEL: ""})
    _create_pool(client, namespace, "pool-a", {"subnet": "203.0.113.0/24", "perNodeBlockSize": 16,
                                               "gateway": "203.0.113.254", "nodeSelector": _selector()})  # fmt: skip
    first = {a.name: ("203.0.113.1", "203.0.113.16"), b.name: ("203.0.113.17", "203.0.113.32")}
    wait_for(lambda: _blocks(client, namespace, "pool-a") == first, timeout=30, describe="pool-a's blocks")
    allocated = time.monotonic() - began

    a.stop()  # the node is deleted: its block is freed, b keeps its own
    wait_for(lambda: _blocks(client, namespace, "pool-a") == {b.name: first[b.name]}, timeout=30,
             describe="a's block freed")  # fmt: skip
    c = fake_node(name=f"{LABEL}-c", labels={LABEL: ""})
    wait_for(lambda: _blocks(client, namespace, "pool-a") == {b.name: first[b.name], c.name: first[a.name]},
             timeout=30, describe="the freed block goes to the new node")  # fmt: skip
    print(f"pool-a: two nodes allocated {allocated:.1f} s after start")


@pytest.mark.timeout(180)
def test_a_small_pool_names_the_node_left_out_and_an_invalid_one_holds_nothing(
    pools_operator: NetworkOperatorThread, client: Client, namespace: str, fake_node: FakeNodeFactory
) -> None:
    nodes = [fake_node(name=f"{LABEL}-s{i}", labels={LABEL: ""}) for i in range(3)]
    # 10.9.0.0/29: blocks .1-.2, .3-.4, .5-.6 (none may reach .7): three nodes fit, a fourth does not.
    _create_pool(client, namespace, "small", {"subnet": "10.9.0.0/29", "perNodeBlockSize": 2,
                                              "nodeSelector": _selector()})  # fmt: skip
    wait_for(lambda: len(_blocks(client, namespace, "small") or {}) == 3, timeout=30, describe="small's blocks")
    fourth = fake_node(name=f"{LABEL}-s3", labels={LABEL: ""})
    wait_for(
        lambda: any(fourth.name in (e.message or "") for e in client.list(Event, namespace=namespace)
                    if e.reason == "IPPoolExhausted"),
        timeout=30, describe="an IPPoolExhausted Event naming the fourth node",
    )  # fmt: skip
    assert set(_blocks(client, namespace, "small") or {}) == {n.name for n in nodes}

    _create_pool(client, namespace, "broken", {"subnet": "10.10.0.0/24", "perNodeBlockSize": 4,
                                               "gateway": "10.11.0.1", "nodeSelector": _selector()})  # fmt: skip
    wait_for(lambda: _blocks(client, namespace, "broken") == {}, timeout=30, describe="broken pool: no blocks")
    events = [e.message or "" for e in client.list(Event, namespace=namespace) if e.reason == "InvalidIPPool"]
    assert any("spec.gateway: must be inside the subnet" in m for m in events), events
