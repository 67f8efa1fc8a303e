"""One suite over both KubeClient implementations: lightkube's ``Kube`` and the simulator's ``RestKube``.

Each runs against the same in-memory API (``kube.fakeapi``); the assertions read the objects left there,
so the two clients are held to the same results, and the simulator's pod informer is the operator's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpu_operator.kube.api import Kube
from gpu_operator.kube.client import KubeClient
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.kube.informer import Informer
from gpu_operator.kube.nodecluster import ClientCluster, LightkubeCluster, RestCluster
from gpu_operator.kube.objects import Eviction
from gpu_operator.kube.restkube import RestKube, api_path
from gpu_operator.sim.kubelet.podwatch import pod_informer

JSON = dict[str, Any]
Make = Callable[[FakeApi], KubeClient]
CLIENTS: dict[str, Make] = {
    "Kube": lambda api: Kube(api.client()),
    "RestKube": lambda api: RestKube(api.rest_client()),
}


def _cm(name: str, *, labels: dict[str, str] | None = None, data: str = "v") -> JSON:
    meta = {"name": name, "namespace": "ns", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": data}}


def _pod(name: str, *, node: str) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"},
    }  # fmt: skip


async def _settle() -> None:
    for _ in range(100):  # the fake answers in one loop step; a watch event needs a few
        await asyncio.sleep(0)


def _run(make: Make, scenario: Callable[[FakeApi, KubeClient], Awaitable[None]]) -> FakeApi:
    api = FakeApi()

    async def main() -> None:
        await scenario(api, make(api))

    asyncio.run(main())
    return api


@pytest.fixture(params=sorted(CLIENTS))
def make(request: pytest.FixtureRequest) -> Make:
    return CLIENTS[request.param]


def test_both_are_kube_clients(make: Make) -> None:
    assert isinstance(make(FakeApi()), KubeClient)


def test_apply_get_list_patch_and_delete_leave_the_same_objects(make: Make) -> None:
    async def scenario(api: FakeApi, kube: KubeClient) -> None:
        assert await kube.get("v1", "ConfigMap", "a", namespace="ns") is None
        stored = await kube.apply(_cm("a", labels={"team": "x"}))
        assert stored["metadata"]["uid"]
        assert "managedFields" not in stored["metadata"]
        await kube.apply(_cm("b"))
        await kube.apply(_cm("a", labels={"team": "x"}, data="w"))  # apply again: an update
        await kube.patch("v1", "ConfigMap", "b", {"metadata": {"labels": {"team": "y"}}}, namespace="ns")
        got = await kube.get("v1", "ConfigMap", "a", namespace="ns")
        assert got is not None
        assert got["data"] == {"k": "w"}
        names = [o["metadata"]["name"] for o in await kube.list_objects("v1", "ConfigMap", namespace="ns")]
        assert names == ["a", "b"]
        selected = await kube.list_objects("v1", "ConfigMap", namespace="ns", labels={"team": "y"})
        assert [o["metadata"]["name"] for o in selected] == ["b"]
        by_field = await kube.list_objects("v1", "ConfigMap", namespace="ns", fields={"metadata.name": "a"})
        assert [o["metadata"]["name"] for o in by_field] == ["a"]
        assert await kube.delete("v1", "ConfigMap", "a", namespace="ns") is True
        assert await kube.delete("v1", "ConfigMap", "a", namespace="ns") is False

    api = _run(make, scenario)
    assert api.get("v1", "configmaps", "a", "ns") is None
    assert api.get("v1", "configmaps", "b", "ns")["metadata"]["labels"] == {"team": "y"}  # type: ignore[index]


def test_status_event_and_eviction(make: Make) -> None:
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"}, "spec": {}}

    async def scenario(api: FakeApi, kube: KubeClient) -> None:
        await kube.apply(policy)
        await kube.patch_status("nvidia.com/v1", "ClusterPolicy", "cp", {"state": "ready"})
        await kube.event(involved=policy, reason="Ready", message="all operands ready", namespace="ns")
        await kube.create(_pod("p", node="n1"))
        assert await kube.evict(namespace="ns", name="p") is Eviction.EVICTED
        assert await kube.evict(namespace="ns", name="p") is Eviction.GONE

    api = _run(make, scenario)
    assert api.get("nvidia.com/v1", "clusterpolicies", "cp")["status"] == {"state": "ready"}  # type: ignore[index]
    events = [o for (gv, plural, *_), o in api.objects.items() if plural == "events"]
    assert [(e["reason"], e["involvedObject"]["name"], e["metadata"]["namespace"]) for e in events] == [
        ("Ready", "cp", "ns")
    ]
    assert api.get("v1", "pods", "p", "ns") is None


def test_a_paged_list_says_its_version_and_a_watch_follows_from_it(make: Make) -> None:
    async def scenario(api: FakeApi, kube: KubeClient) -> None:
        await kube.apply(_cm("a"))
        listing = kube.list_stream("v1", "ConfigMap", namespace="ns")
        assert [o["metadata"]["name"] async for o in listing] == ["a"]
        seen: list[tuple[str, str]] = []

        async def follow() -> None:
            async for kind, obj in kube.watch(
                "v1", "ConfigMap", namespace="ns", resource_version=listing.resource_version
            ):
                seen.append((kind, obj["metadata"]["name"]))

        task = asyncio.create_task(follow())
        await _settle()
        await kube.apply(_cm("b"))
        await kube.delete("v1", "ConfigMap", "a", namespace="ns")
        await _settle()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert seen == [("ADDED", "b"), ("DELETED", "a")]  # nothing from before the list's version

    _run(make, scenario)


def test_an_informer_runs_the_same_on_either_client(make: Make) -> None:
    async def scenario(api: FakeApi, kube: KubeClient) -> None:
        informer = Informer(kube, "v1", "ConfigMap", namespace="ns", labels={"team": "x"})
        stop = asyncio.Event()
        task = asyncio.create_task(informer.run(stop=stop))
        await kube.apply(_cm("a", labels={"team": "x"}))
        await kube.apply(_cm("other"))
        await informer.synced.wait()
        await _settle()
        await kube.apply(_cm("b", labels={"team": "x"}))
        await _settle()
        assert sorted(name for _, name in informer.items) == ["a", "b"]
        stop.set()
        await task

    _run(make, scenario)


def test_rest_paths_follow_the_registry() -> None:
    assert api_path("v1", "Pod", namespace="ns", name="p") == "/api/v1/namespaces/ns/pods/p"
    assert api_path("v1", "Node", namespace="ignored", name="n") == "/api/v1/nodes/n"
    assert api_path("nvidia.com/v1", "ClusterPolicy") == "/apis/nvidia.com/v1/clusterpolicies"
    assert api_path("apps/v1", "DaemonSet", namespace="gpu") == "/apis/apps/v1/namespaces/gpu/daemonsets"


def test_set_based_selectors_are_refused_by_the_rest_client_with_a_clear_error() -> None:
    kube = RestKube(FakeApi().rest_client())
    with pytest.raises(TypeError, match="equality and existence"):
        kube.list_stream("v1", "Pod", labels={"app": ["a", "b"]})  # type: ignore[dict-item]


def test_the_simulators_pod_informer_keeps_whole_pods_only_for_its_own_nodes() -> None:
    events: list[tuple[str, str, bool]] = []

    async def scenario() -> None:
        api = FakeApi()
        rest = api.rest_client()
        kube = RestKube(rest)
        mine = {"sim-1": object()}
        informer = pod_informer(
            api=rest, nodes=mine.keys(), on_event=lambda kind, pod: events.append(
                (kind, pod["metadata"]["name"], "containers" in pod.get("spec", {}))
            ),
        )  # fmt: skip
        await kube.create(_pod("unbound", node=""))
        await kube.create(_pod("here", node="sim-1"))
        await kube.create(_pod("there", node="real-1"))
        stop = asyncio.Event()
        task = asyncio.create_task(informer.run(stop=stop))
        await informer.synced.wait()
        await kube.delete("v1", "Pod", "here", namespace="ns")
        await _settle()
        stop.set()
        await task
        await rest.close()

    asyncio.run(scenario())
    assert events == [("ADDED", "here", True), ("ADDED", "there", False), ("DELETED", "here", True)]


CLUSTERS: dict[str, Callable[[FakeApi], ClientCluster]] = {
    "LightkubeCluster": lambda api: LightkubeCluster(node_name="n1", client=api.client()),
    "RestCluster": lambda api: RestCluster(api=api.rest_client(), node_name="n1"),
}


@pytest.mark.parametrize("which", sorted(CLUSTERS))
def test_an_agents_cluster_lists_its_nodes_pods_by_any_label_selector(which: str) -> None:
    api = FakeApi()
    for name, node, tier in (
        ("web", "n1", "web"),
        ("batch", "n1", "batch"),
        ("bare", "n1", None),
        ("far", "n2", "web"),
    ):
        pod = _pod(name, node=node)
        if tier:
            pod["metadata"]["labels"] = {"tier": tier}
        api.put(pod, plural="pods")
    cluster = CLUSTERS[which](api)

    async def names(selector: str | None) -> list[str]:
        return sorted(p.name for p in await cluster.list_pods(selector=selector))

    async def scenario() -> dict[str | None, list[str]]:
        selectors = (None, "tier=web", "tier!=batch", "tier in (web,batch)", "!tier", "tier")
        return {selector: await names(selector) for selector in selectors}

    assert asyncio.run(scenario()) == {
        None: ["bare", "batch", "web"],
        "tier=web": ["web"],
        "tier!=batch": ["bare", "web"],
        "tier in (web,batch)": ["batch", "web"],
        "!tier": ["bare"],
        "tier": ["batch", "web"],
    }


@pytest.mark.parametrize("which", sorted(CLUSTERS))
def test_an_agents_cluster_patches_its_node_and_says_when_it_is_missing(which: str) -> None:
    api = FakeApi()
    cluster = CLUSTERS[which](api)

    async def scenario() -> None:
        with pytest.raises(LookupError, match="Node n1 does not exist"):
            await cluster.node()
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "1"}}}, plural="nodes")
        await cluster.patch_node(labels={"a": None, "b": "2"}, unschedulable=True)
        node = await cluster.node()
        assert node.labels == {"b": "2"}
        assert node.unschedulable
        await cluster.event(reason="Drained", message="2 pods evicted")

    asyncio.run(scenario())
    events = [o for (_, plural, *_), o in api.objects.items() if plural == "events"]
    assert [(e["reason"], e["metadata"]["namespace"], e["source"]["host"]) for e in events] == [
        ("Drained", "default", "n1")
    ]
