"""Faults in every loop of the operator leave it running: logged, counted, retried, ``/healthz`` green.

The operator runs unchanged on lightkube over :class:`~gpu_operator.kube.fakeapi.FakeApi` (no
sockets). Each fault (the network failing, a slow API server, HTTP 500, 429 with Retry-After, 410
Gone) is injected twice into requests only one loop makes: the policy reconciler's operands, the
node labels it writes, an NVIDIADriver's status, the Lease; the driver-upgrade pass reads only
caches, so its fault is raised by the pass itself. After the faults the loop's next pass does its
work: the object it was writing is on the (fake) cluster. A task that really dies turns health red.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2 as httpx
import pytest

import gpu_operator.reconcile.operator as operator_module
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.reconcile.endpoints import OperatorMetrics
from gpu_operator.reconcile.operator import LEASE, RECONCILE, UPGRADE, Operator
from gpu_operator.render import OperatorSettings
from gpu_operator.runtime.loop import LoopStats

NAMESPACE = "gpu-operator"
TIMES = 2
FAULTS: dict[str, dict[str, Any]] = {
    "ConnectError": {"error": httpx.ConnectError("connection refused")},
    "ReadTimeout": {"error": httpx.ReadTimeout("timed out")},
    "http_500": {"status": 500},
    "http_429": {"status": 429, "headers": {"Retry-After": "0.05"}},
    "http_410": {"status": 410},
}


def _cluster(*, nvidiadriver: bool = False) -> FakeApi:
    api = FakeApi()
    spec: dict[str, Any] = {"driver": {"useNvidiaDriverCRD": True}} if nvidiadriver else {}
    api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": spec}, plural="clusterpolicies")  # fmt: skip
    if nvidiadriver:
        api.put({"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "default"},
                 "spec": {"driverType": "gpu", "version": "570.124.06"}}, plural="nvidiadrivers")  # fmt: skip
    api.put({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "gpu-1", "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, plural="nodes")  # fmt: skip
    return api


async def _until(check: Callable[[], object], *, what: str, timeout: float = 1.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what}")
        await asyncio.sleep(0.005)


@asynccontextmanager
async def _running(api: FakeApi) -> AsyncIterator[Operator]:
    op = Operator(
        client=api.client(),
        namespace=NAMESPACE,
        settings=OperatorSettings.from_env({}),
        backoff_seconds=(0.01, 0.05),
        informer_retry_seconds=0.01,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(op.run(stop=stop))
    try:
        await _until(lambda: op.supervisor is not None and RECONCILE in op.supervisor.loops, what="loops started")
        yield op
    finally:
        stop.set()
        await task


def _loop_stats(op: Operator, name: str) -> LoopStats:
    assert op.supervisor is not None
    return op.supervisor.loops[name].stats


async def _survives(op: Operator, *, loop: str, kind: str, done: Callable[[], object]) -> None:
    """The loop counted TIMES failures of ``kind``, went on to a successful pass, and health stayed green."""
    stats = _loop_stats(op, loop)
    await _until(lambda: stats.errors[kind] >= TIMES, what=f"{loop} counted {TIMES} x {kind}")
    await _until(done, what=f"{loop} did its work after the faults")
    assert stats.errors[kind] == TIMES
    assert op.healthy
    metrics = OperatorMetrics(loops=op.metric_lines).render()
    assert f'gpu_operator_loop_errors_total{{loop="{loop}",error="{kind}"}} {TIMES}' in metrics
    assert f'gpu_operator_loop_alive{{loop="{loop}"}} 1' in metrics


@pytest.mark.parametrize("kind", FAULTS)
def test_the_policy_reconciler_survives(kind: str) -> None:
    async def scenario() -> None:
        api = _cluster()
        api.fail(method="PATCH", path=r"/daemonsets/nvidia-device-plugin-daemonset", times=TIMES, **FAULTS[kind])
        async with _running(api) as op:
            plugin = ("apps/v1", "daemonsets", "nvidia-device-plugin-daemonset", NAMESPACE)
            await _survives(op, loop=RECONCILE, kind=kind, done=lambda: api.get(*plugin) is not None)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_node_labelling_survives(kind: str) -> None:
    async def scenario() -> None:
        api = _cluster()
        api.fail(method="PATCH", path=r"^/api/v1/nodes/gpu-1", times=TIMES, **FAULTS[kind])
        async with _running(api) as op:

            def labelled() -> bool:
                node = api.get("v1", "nodes", "gpu-1") or {}
                return bool(node["metadata"]["labels"].get("nvidia.com/gpu.present") == "true")

            await _survives(op, loop=RECONCILE, kind=kind, done=labelled)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_the_nvidiadriver_reconciler_survives(kind: str) -> None:
    async def scenario() -> None:
        api = _cluster(nvidiadriver=True)
        # The reconciler's status (conditions), not the upgrade controller's (status.driverUpgrade).
        api.fail(method="PATCH", path=r"/nvidiadrivers/default/status", body="conditions", times=TIMES, **FAULTS[kind])
        async with _running(api) as op:

            def reported() -> bool:
                driver = api.get("nvidia.com/v1alpha1", "nvidiadrivers", "default") or {}
                return bool((driver.get("status") or {}).get("conditions"))

            await _survives(op, loop=RECONCILE, kind=kind, done=reported)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_the_lease_survives(kind: str) -> None:
    async def scenario() -> None:
        api = _cluster()
        # The first acquisition fails twice: no leadership, so no work, until the third try takes the Lease.
        api.fail(method="PATCH", path=r"/leases/", times=TIMES, **FAULTS[kind])
        async with _running(api) as op:
            lease = ("coordination.k8s.io/v1", "leases", "53822513.nvidia.com", NAMESPACE)
            await _survives(op, loop=LEASE, kind=kind, done=lambda: api.get(*lease) is not None and op.passes > 0)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", FAULTS)
def test_the_upgrade_loop_survives(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = operator_module.upgrade_pass
    calls = {"n": 0}

    async def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= TIMES:
            raise _as_exception(kind)
        return await real(*args, **kwargs)

    monkeypatch.setattr(operator_module, "upgrade_pass", failing)

    async def scenario() -> None:
        async with _running(_cluster()) as op:
            await _survives(op, loop=UPGRADE, kind=kind, done=lambda: op.upgrades is not None)

    asyncio.run(scenario())


def _as_exception(kind: str) -> Exception:
    """The exception lightkube raises for a fault: the transport's own, or an ApiError for a status."""
    fault = FAULTS[kind]
    if "error" in fault:
        error: Exception = type(fault["error"])(*fault["error"].args)  # a fresh one of the same kind
        return error
    from lightkube import ApiError  # noqa: PLC0415

    request = httpx.Request("GET", "http://fake-api.invalid/")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "injected", "code": fault["status"]}
    return ApiError(request=request, response=httpx.Response(fault["status"], json=body, request=request))


def test_a_watch_that_fails_is_listed_again_and_the_operator_stays_healthy() -> None:
    async def scenario() -> None:
        api = _cluster()
        api.fail(path=r"^/api/v1/nodes\?.*watch=true", times=TIMES, status=410)
        async with _running(api) as op:
            await _until(lambda: op.passes > 0, what="a reconcile pass")
            assert op.kube is not None
            nodes = next(i for i in op.kube.informers if i.kind == "Node")
            await _until(lambda: nodes.lists > TIMES, what="the Node cache listed again after each 410")
            api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-2"}}, plural="nodes")
            await _until(lambda: ("", "gpu-2") in nodes.items or any("gpu-2" in str(k) for k in nodes.items),
                         what="the new node seen through the recovered watch")  # fmt: skip
            assert op.healthy

    asyncio.run(scenario())


@pytest.mark.parametrize("loop", [RECONCILE, UPGRADE, LEASE])
def test_a_loop_that_dies_turns_health_red(loop: str) -> None:
    async def scenario() -> None:
        async with _running(_cluster()) as op:
            assert op.supervisor is not None
            await _until(lambda: loop in op.supervisor.tasks, what=f"{loop} running")  # type: ignore[union-attr]
            assert op.healthy
            op.supervisor.tasks[loop].cancel()  # what no failed pass can do: the task itself ends
            await _until(lambda: not op.healthy, what="health red")
            assert loop in op.supervisor.died
            metrics = OperatorMetrics(loops=op.metric_lines).render()
            assert f'gpu_operator_loop_alive{{loop="{loop}"}} 0' in metrics

    asyncio.run(scenario())


def test_an_error_escaping_a_task_is_reported_with_its_reason() -> None:
    async def scenario() -> None:
        from gpu_operator.runtime.supervisor import Supervisor  # noqa: PLC0415

        supervisor = Supervisor(stop=asyncio.Event())

        async def broken() -> None:
            raise RuntimeError("bug outside any loop")

        supervisor.spawn("broken", broken())
        await _until(lambda: not supervisor.healthy, what="health red")
        assert supervisor.died == {"broken": "RuntimeError: bug outside any loop"}
        await supervisor.close()

    asyncio.run(scenario())
