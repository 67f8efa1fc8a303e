"""An informer against a real API server survives an outage: kube-apiserver is stopped and started
again under it, objects change right after, and the cache ends up exactly like the cluster. Two informers
run side by side, one through each :class:`~gpu_operator.kube.client.KubeClient` (lightkube's ``Kube``,
the simulator's ``RestKube``): both clients keep one informer's behaviour on a real server. lightkube's
is made as the operator makes it (``kube.connect.async_client``), over the operator's own transport
(``kube.transport``), whose watch connection the restart breaks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lightkube import codecs
from lightkube.resources.core_v1 import ConfigMap

from gpu_operator.kube.api import Kube
from gpu_operator.kube.connect import async_client
from gpu_operator.kube.informer import Informer
from gpu_operator.kube.restclient import ApiClient, ClusterAccess
from gpu_operator.kube.restkube import RestKube
from gpu_operator.kube.slim import slim_metadata
from gpu_operator.localcluster.binaries import ALL_BINARIES, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster

NAMESPACE = "default"


async def _until(check: Callable[[], bool], *, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(0.1)


def _configmap(name: str) -> ConfigMap:
    return codecs.from_dict({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})  # type: ignore[return-value]


def test_an_informer_relists_after_the_api_server_restarts() -> None:
    with LocalCluster(binaries=locate_binaries(required=ALL_BINARIES)) as cluster:
        admin = cluster.client(field_manager="tests")
        changes: dict[str, list[tuple[str | None, str | None]]] = {"Kube": [], "RestKube": []}

        def recorder(client: str) -> Callable[[dict | None, dict | None], None]:  # type: ignore[type-arg]
            def record(old: dict | None, new: dict | None) -> None:  # type: ignore[type-arg]
                names = ((old or {}).get("metadata", {}).get("name"), (new or {}).get("metadata", {}).get("name"))
                changes[client].append(names)

            return record

        async def scenario() -> list[Informer]:
            client = async_client(kubeconfig=cluster.kubeconfig_path, field_manager=None)
            rest = ApiClient(access=ClusterAccess.from_kubeconfig(cluster.kubeconfig_path))
            informers = [
                Informer(
                    source,
                    "v1",
                    "ConfigMap",
                    namespace=NAMESPACE,
                    labels={},
                    transform=slim_metadata,
                    on_change=recorder(type(source).__name__),
                )
                for source in (Kube(client), RestKube(rest))
            ]
            stop = asyncio.Event()
            tasks = [asyncio.create_task(informer.run(stop=stop)) for informer in informers]

            def cached(name: str) -> bool:
                return all((NAMESPACE, name) in informer.items for informer in informers)

            try:
                await asyncio.to_thread(admin.create, _configmap("before"))
                await _until(lambda: cached("before"), what="the first ConfigMap cached by both")
                await asyncio.to_thread(cluster.restart_apiserver)
                # Right after the outage, before the informers have listed again (they back off): nothing is lost.
                await asyncio.to_thread(admin.delete, ConfigMap, "before", namespace=NAMESPACE)
                await asyncio.to_thread(admin.create, _configmap("after"))
                await _until(
                    lambda: cached("after") and not any((NAMESPACE, "before") in i.items for i in informers),
                    what="both caches following the cluster after the restart",
                )
            finally:
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
                await client.close()
                await rest.close()
            return informers

        informers = asyncio.run(scenario())
        admin.close()
    for informer, seen in zip(informers, changes.values(), strict=True):
        assert informer.lists >= 2  # the broken watch made it list again
        assert ("before", None) in seen
        assert (None, "after") in seen
        assert informer.items[(NAMESPACE, "after")]["metadata"]["name"] == "after"
        assert "data" not in informer.items[(NAMESPACE, "after")]
