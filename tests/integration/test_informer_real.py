"""An informer against a real API server survives an outage: kube-apiserver is stopped and started
again under it, objects change right after, and the cache ends up exactly like the cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lightkube import AsyncClient, KubeConfig, codecs
from lightkube.resources.core_v1 import ConfigMap

from gpu_operator.kube.informer import Informer
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
        changes: list[tuple[str | None, str | None]] = []

        def record(old: dict | None, new: dict | None) -> None:  # type: ignore[type-arg]
            changes.append(((old or {}).get("metadata", {}).get("name"), (new or {}).get("metadata", {}).get("name")))

        async def scenario() -> Informer:
            client = AsyncClient(config=KubeConfig.from_file(cluster.kubeconfig_path))
            informer = Informer(
                client, ConfigMap, "v1", "ConfigMap", namespace=NAMESPACE, labels={}, transform=slim_metadata,
                on_change=record,
            )  # fmt: skip
            stop = asyncio.Event()
            task = asyncio.create_task(informer.run(stop=stop))
            try:
                await asyncio.to_thread(admin.create, _configmap("before"))
                await _until(lambda: (NAMESPACE, "before") in informer.items, what="the first ConfigMap cached")
                await asyncio.to_thread(cluster.restart_apiserver)
                # Right after the outage, before the informer has listed again (it backs off): nothing is lost.
                await asyncio.to_thread(admin.delete, ConfigMap, "before", namespace=NAMESPACE)
                await asyncio.to_thread(admin.create, _configmap("after"))
                await _until(
                    lambda: (NAMESPACE, "after") in informer.items and (NAMESPACE, "before") not in informer.items,
                    what="the cache following the cluster after the restart",
                )
            finally:
                stop.set()
                await asyncio.wait_for(task, timeout=30)
                await client.close()
            return informer

        informer = asyncio.run(scenario())
        admin.close()
    assert informer.lists >= 2  # the broken watch made it list again
    assert ("before", None) in changes
    assert (None, "after") in changes
    assert informer.items[(NAMESPACE, "after")]["metadata"]["name"] == "after"
    assert "data" not in informer.items[(NAMESPACE, "after")]
