"""``gather_facts`` on the in-memory API: the ConfigMaps' names and keys, from the API or the operator's cache.

NVIDIA's driver contract mounts each key of ``kernelModuleConfig``, ``repoConfig`` and ``certConfig`` as
a file, so the facts carry the keys (``data`` and ``binaryData``) of the operator namespace's
ConfigMaps; the ConfigMap informer keeps them (not the values), and a key added or removed wakes the
policy reconciler while a changed value does not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.facts import gather_facts
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.kube.informer import Informer
from gpu_operator.kube.slim import data_keys, slim_config_map
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.render import ClusterFacts

NS = "gpu-operator"
JSON = dict[str, Any]


def _cm(name: str, *, namespace: str = NS, data: JSON | None = None, binary: JSON | None = None) -> JSON:
    obj: JSON = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    if data is not None:
        obj["data"] = data
    if binary is not None:
        obj["binaryData"] = binary
    return obj


def _api() -> FakeApi:
    api = FakeApi()
    api.put(_cm("kmod", data={"nvidia.conf": "NVreg_X=1", "nvidia-uvm.conf": "y"}), plural="configmaps")
    api.put(_cm("repos", data={"b.list": "deb b"}, binary={"a.gpg": "AAAA"}), plural="configmaps")
    api.put(_cm("empty"), plural="configmaps")
    api.put(_cm("elsewhere", namespace="other", data={"k": "v"}), plural="configmaps")
    api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lic", "namespace": NS}}, plural="secrets")
    return api


EXPECTED = {"empty": (), "kmod": ("nvidia-uvm.conf", "nvidia.conf"), "repos": ("a.gpg", "b.list")}


def _gather(api: FakeApi, *, informers: tuple[Informer, ...] = ()) -> tuple[ClusterFacts, Kube]:
    async def run() -> tuple[ClusterFacts, Kube]:
        client = api.client()
        try:
            kube = Kube(client, informers=informers)
            return await gather_facts(kube, nodes=[], namespace=NS, precompiled=False), kube
        finally:
            await client.close()

    return asyncio.run(run())


def test_facts_carry_the_keys_of_the_namespaces_configmaps() -> None:
    facts, kube = _gather(_api())
    assert facts.configmap_keys == EXPECTED
    assert facts.configmaps == frozenset(EXPECTED)  # names as before: "elsewhere" is in another namespace
    assert facts.secrets == frozenset({"lic"})
    assert kube.cached_reads == 0


def test_the_configmap_cache_answers_with_the_same_keys_and_no_values() -> None:
    api = _api()
    listed = [_cm("kmod", data={"nvidia.conf": "NVreg_X=1", "nvidia-uvm.conf": "y"}),
              _cm("repos", data={"b.list": "deb b"}, binary={"a.gpg": "AAAA"}), _cm("empty")]  # fmt: skip
    cache = Informer(None, "v1", "ConfigMap", namespace=NS, transform=slim_config_map)  # type: ignore[arg-type]
    for obj in listed:
        cache.apply("ADDED", obj)
    cache.synced.set()
    assert cache.items[(NS, "kmod")]["data"] == {"nvidia-uvm.conf": "", "nvidia.conf": ""}  # keys, not values
    assert all(data_keys(slim_config_map(o)) == data_keys(o) for o in listed)
    configmap_lists = sum(1 for method, path in api.requests if method == "GET" and path.endswith("/configmaps"))
    facts, kube = _gather(api, informers=(cache,))
    assert facts.configmap_keys == EXPECTED
    assert kube.cached_reads == 1
    after = sum(1 for method, path in api.requests if method == "GET" and path.endswith("/configmaps"))
    assert after == configmap_lists  # the ConfigMaps were not listed from the API server


def test_a_key_added_or_removed_wakes_the_reconciler_a_changed_value_does_not() -> None:
    woken: list[str] = []
    informers = operator_informers(
        None,
        namespace=NS,
        wake_all=lambda: woken.append("all"),
        wake_reconciler=lambda: woken.append("reconciler"),
        wake_upgrade=lambda: woken.append("up"),
    )
    (configmaps,) = [i for i in informers if i.kind == "ConfigMap"]
    configmaps.apply("ADDED", _cm("kmod", data={"nvidia.conf": "a"}))
    configmaps.apply("MODIFIED", _cm("kmod", data={"nvidia.conf": "b"}))  # a value: the mounts stay the same
    configmaps.apply("MODIFIED", _cm("kmod", data={"nvidia.conf": "b", "nvidia-uvm.conf": "c"}))  # a key added
    configmaps.apply("MODIFIED", _cm("kmod", data={"nvidia-uvm.conf": "c"}))  # a key removed
    configmaps.apply("MODIFIED", _cm("kmod", binary={"nvidia-uvm.conf": "Yw=="}))  # moved to binaryData
    assert woken == ["reconciler", "reconciler", "reconciler", "reconciler"]


def _node(os_version: str) -> JSON:
    labels = {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
              "feature.node.kubernetes.io/system-os_release.VERSION_ID": os_version}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}


def test_facts_are_made_again_when_a_configmap_or_a_node_changes() -> None:
    api = _api()

    async def run(nodes: list[JSON]) -> ClusterFacts:
        client = api.client()
        try:
            return await gather_facts(Kube(client), nodes=nodes, namespace=NS, precompiled=False)
        finally:
            await client.close()

    nodes = [_node("22.04")]
    first = asyncio.run(run(nodes))
    assert asyncio.run(run(nodes)) is first  # the same nodes and objects: the same facts, not made again
    api.put(_cm("added", data={"k": "v"}), plural="configmaps")
    second = asyncio.run(run(nodes))
    assert "added" in (second.configmap_keys or {})
    assert "added" not in (first.configmap_keys or {})
    assert second.os_tag == "ubuntu22.04"
    assert asyncio.run(run([_node("24.04")])).os_tag == "ubuntu24.04"  # the informer's new object for the node
