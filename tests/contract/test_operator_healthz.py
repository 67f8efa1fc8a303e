"""``/healthz`` over HTTP: green while the operator's loops fail and retry, red once one really dies.

The operator runs on the in-memory API (``kube.fakeapi``); its probe server is the real one, on a
loopback port, read with a plain HTTP GET as the kubelet's liveness probe would.
"""

from __future__ import annotations

import asyncio
import time

import httpx2 as httpx

from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.reconcile.endpoints import OperatorMetrics, serve
from gpu_operator.reconcile.operator import RECONCILE, Operator
from gpu_operator.render import OperatorSettings

LIVENESS_DEADLINE = 10.0  # the bound: a dead loop turns the probe red within 10 s


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split(" ")[1]), body


def test_healthz_stays_green_through_failures_and_turns_red_when_a_loop_dies() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
                 "spec": {}}, plural="clusterpolicies")  # fmt: skip
        api.fail(path=r"/daemonsets/", method="PATCH", times=3, error=httpx.ConnectError("refused"))
        op = Operator(client=api.client(), namespace="gpu-operator", settings=OperatorSettings.from_env({}),
                      backoff_seconds=(0.01, 0.05))  # fmt: skip
        ready = asyncio.Event()
        server = await serve(address="127.0.0.1:0", metrics=OperatorMetrics(loops=op.metric_lines),
                             healthy=lambda: op.healthy, ready=ready)  # fmt: skip
        port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        task = asyncio.create_task(op.run(stop=stop))
        try:
            deadline = time.monotonic() + 5
            while op.reconcile_stats.failures < 3 or op.passes < 1:
                assert time.monotonic() < deadline, "the reconciler neither failed three times nor recovered"
                await asyncio.sleep(0.01)
            assert await _get(port, "/healthz") == (200, "ok\n")  # failed passes are retried, not fatal
            code, metrics = await _get(port, "/metrics")
            assert code == 200
            assert 'gpu_operator_loop_errors_total{loop="reconcile",error="ConnectError"} 3' in metrics

            assert op.supervisor is not None
            op.supervisor.tasks[RECONCILE].cancel()  # the loop itself ends: no pass can do that
            died = time.monotonic()
            while (await _get(port, "/healthz"))[0] != 503:
                assert time.monotonic() - died < LIVENESS_DEADLINE
                await asyncio.sleep(0.05)
            code, metrics = await _get(port, "/metrics")
            assert 'gpu_operator_loop_alive{loop="reconcile"} 0' in metrics
        finally:
            stop.set()
            await task
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
