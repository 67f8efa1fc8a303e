"""The operator's HTTP transport (``kube.transport``) against a real kube-apiserver over TLS.

What the unit tests cannot show: the API server's own framing (chunked watch streams, gzip-compressed
large lists, keep-alive), client-certificate TLS from a kubeconfig, and a burst of concurrent writes
served by a few reused connections rather than a handshake each.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube import ApiError, AsyncClient, KubeConfig, codecs
from lightkube.resources.core_v1 import ConfigMap

from gpu_operator.kube.connect import stream_transport
from gpu_operator.localcluster.cluster import LocalCluster

NAMESPACE = "default"
BURST = 16  # as many writes at once as an upgrade pass sends (execute.PARALLEL_NODES)


def _configmap(name: str, *, size: int = 10) -> ConfigMap:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"k": "x" * size},
    }
    return codecs.from_dict(body)  # type: ignore[return-value]


def test_lists_watches_and_writes_over_reused_tls_connections(local_cluster: LocalCluster) -> None:
    config = KubeConfig.from_file(local_cluster.kubeconfig_path).get()
    assert config is not None
    transport = stream_transport(config)

    async def scenario() -> tuple[list[str], int, list[tuple[str, str]]]:
        client = AsyncClient(config=config, field_manager="tests", transport=transport)
        seen: list[tuple[str, str]] = []
        try:
            # 60 objects of 4 KiB: the list is large enough for the API server to gzip it.
            names = [f"transport-{i}" for i in range(60)]
            limit = asyncio.Semaphore(BURST)

            async def create(name: str) -> None:
                async with limit:
                    await client.create(_configmap(name, size=4096))

            await asyncio.gather(*(create(n) for n in names))
            opened_by_burst = transport.opened
            listed = sorted(
                c.metadata.name
                for c in [x async for x in client.list(ConfigMap, namespace=NAMESPACE)]
                if c.metadata and c.metadata.name and c.metadata.name.startswith("transport-")
            )

            async def watch() -> None:
                async for kind, obj in client.watch(ConfigMap, namespace=NAMESPACE, resource_version="0"):
                    name = str(obj.metadata.name if obj.metadata else "")
                    seen.append((kind, name))
                    if name == "transport-last":
                        return

            watcher = asyncio.create_task(watch())
            await client.create(_configmap("transport-last"))
            await asyncio.wait_for(watcher, timeout=30)
            with pytest.raises(ApiError) as missing:
                await client.get(ConfigMap, "no-such-map", namespace=NAMESPACE)
            assert missing.value.status.code == 404
            for name in [*names, "transport-last"]:
                await client.delete(ConfigMap, name, namespace=NAMESPACE)
            return listed, opened_by_burst, seen
        finally:
            await client.close()

    listed, opened_by_burst, seen = asyncio.run(scenario())
    assert listed == sorted(f"transport-{i}" for i in range(60))
    assert opened_by_burst <= BURST  # 60 creates, 16 at a time: at most one connection per concurrent request
    assert ("ADDED", "transport-last") in seen
    assert ("ADDED", "transport-0") in seen
    # Everything after the burst (a list, a watch, a 404, 61 deletes) reused those, but for the watch's own.
    assert transport.opened <= opened_by_burst + 2
