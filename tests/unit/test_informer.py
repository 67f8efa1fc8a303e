"""Informer caches: slim objects read like whole ones, heartbeats wake nobody, a broken watch loses nothing,
and lists are answered from a synced cache that covers them (else from the API server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest

from gpu_operator.kube.api import Kube, applied_hash, with_applied_hash
from gpu_operator.kube.client import WatchExpiredError
from gpu_operator.kube.informer import Informer, wait_synced
from gpu_operator.kube.slim import slim_node, slim_pod
from gpu_operator.names.pods import pod_view
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.endpoints import OperatorMetrics
from gpu_operator.render import node_info
from gpu_operator.upgrade.collect import driver_view, node_view

JSON = dict[str, Any]
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"


def _node(
    name: str = "n1", *, beat: int = 1, labels: JSON | None = None, ready: str = "True", uid: str | None = None
) -> JSON:
    conditions = [
        {"type": t, "status": s, "lastHeartbeatTime": f"2026-11-30T1{beat}:00:00Z", "reason": "KubeletReady"}
        for t, s in (("MemoryPressure", "False"), ("Ready", ready))
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name, "uid": uid or f"uid-{name}", "resourceVersion": str(beat),
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"nvidia.com/gpu.present": "true", **(labels or {})},
            "annotations": {"nvidia.com/gpu-driver-upgrade-drain.start-time": "1700000000"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"unschedulable": True, "podCIDR": "10.0.0.0/24"},
        "status": {
            "conditions": conditions,
            "capacity": {"nvidia.com/gpu": "8"},
            "images": [{"names": ["registry/a:1"], "sizeBytes": 1}],
            "nodeInfo": {"containerRuntimeVersion": "containerd://2.1.0", "kernelVersion": "6.8.0"},
        },
    }  # fmt: skip


def _pod(name: str = "driver-1", *, ready: str = "True", labels: JSON | None = None) -> JSON:
    env = [
        {"name": "DRIVER_VERSION", "value": "580.65"},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "gpu-operator", "uid": f"uid-{name}",
            "labels": {"app.kubernetes.io/component": "nvidia-driver", "controller-revision-hash": "h1",
                       **(labels or {})},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "ds1",
                                 "controller": True}],
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "ctr", "image": "x", "env": env,
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
        },
        "status": {
            "phase": "Running", "startTime": "2026-11-30T10:00:00Z", "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-30T10:01:00Z",
                            "lastProbeTime": None}],
            "containerStatuses": [{"name": "ctr", "ready": ready == "True", "restartCount": 3, "image": "x",
                                   "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "long"}},
                                   "lastState": {"terminated": {"exitCode": 1}}}],
            "initContainerStatuses": [
                {"name": "init", "ready": True, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                {"name": "cuda-validation", "ready": False, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "gave up: " + "x" * 5000,
                                              "startedAt": "2026-11-30T10:00:01Z"}}},
            ],
        },
    }  # fmt: skip


def test_slim_objects_read_like_whole_ones() -> None:
    node, pod = _node(), _pod(ready="False")
    assert node_info(slim_node(node)) == node_info(node)
    driver_full = driver_view(pod, daemonset=None, newest_hash=None)
    assert driver_view(slim_pod(pod), daemonset=None, newest_hash=None) == driver_full
    assert driver_full.restarts == 3
    assert driver_full.waiting_reason == "CrashLoopBackOff"
    assert pod_view(slim_pod(pod)) == pod_view(pod)
    assert pod_view(pod).gpu
    assert pod_view(pod).empty_dir
    assert pod_view(pod).init_failure.startswith("cuda-validation exited 1: gave up: xxx")  # read through the slim too
    assert len(str(slim_pod(pod)["status"]["initContainerStatuses"][1])) < 1000  # the message bounded
    whole = node_view(node, driver=driver_full, pods=[pod], validators=[pod])
    assert node_view(slim_node(node), driver=driver_full, pods=[slim_pod(pod)], validators=[slim_pod(pod)]) == whole
    assert whole.unschedulable
    assert whole.ready
    assert "managedFields" not in slim_node(node)["metadata"]
    assert "images" not in slim_node(node)["status"]


def _informer(**kw: Any) -> tuple[Informer, list[tuple[JSON | None, JSON | None]]]:
    seen: list[tuple[JSON | None, JSON | None]] = []
    informer = Informer(
        None,  # type: ignore[arg-type]
        "v1", "Node", transform=slim_node, on_change=lambda o, n: seen.append((o, n)), **kw,
    )  # fmt: skip
    return informer, seen


def test_heartbeats_change_nothing_and_real_changes_are_reported_after_caching() -> None:
    informer, seen = _informer()
    informer.apply("ADDED", _node(beat=1))
    informer.apply("MODIFIED", _node(beat=2))  # a heartbeat: only timestamps and resourceVersion moved
    assert len(seen) == 1
    informer.apply("MODIFIED", _node(beat=3, ready="False"))
    informer.apply("MODIFIED", _node(beat=4, ready="False", labels={"team": "a"}))
    informer.apply("DELETED", _node(beat=5))
    informer.apply("DELETED", _node("ghost"))  # never cached: nothing to report
    assert [(o is None, n is None) for o, n in seen] == [(True, False), (False, False), (False, False), (False, True)]
    assert seen[2][1] is not None
    assert seen[2][1]["metadata"]["labels"]["team"] == "a"
    assert informer.items == {}


def test_a_node_change_wakes_the_reconciler_only_when_it_reads_it() -> None:
    woken: list[str] = []
    informers = operator_informers(
        None,
        namespace="gpu-operator",
        wake_all=lambda: woken.append("all"),
        wake_reconciler=lambda: woken.append("reconciler"),
        wake_upgrade=lambda: woken.append("up"),
    )
    nodes = next(i for i in informers if i.kind == "Node")
    driver_pods = next(i for i in informers if i.kind == "Pod" and "app.kubernetes.io/component" in i.labels)
    nodes.apply("ADDED", _node())
    nodes.apply("MODIFIED", _node(beat=2, labels={UPGRADE_STATE: "cordon-required"}))  # the rollout's own write
    nodes.apply("MODIFIED", _node(beat=3, labels={UPGRADE_STATE: "cordon-required"}, ready="False"))
    nodes.apply(
        "MODIFIED", _node(beat=4, labels={UPGRADE_STATE: "cordon-required", "nvidia.com/gpu.deploy.driver": "false"})
    )
    driver_pods.apply("MODIFIED", _pod())
    driver_pods.apply("MODIFIED", _pod(ready="False"))
    assert woken == ["all", "up", "up", "all", "up", "up"]


def test_lists_are_served_from_a_synced_cache_that_covers_them() -> None:
    calls: list[tuple[Any, ...]] = []

    class Client:
        def list(self, res: Any, **kw: Any) -> AsyncIterator[Any]:
            calls.append((res, kw))

            async def empty() -> AsyncIterator[Any]:
                nothing: list[Any] = []
                for item in nothing:
                    yield item

            return empty()

    pods = Informer(
        Client(),  # type: ignore[arg-type]
        "v1", "Pod", namespace="gpu-operator", labels={"app": "driver"},
    )  # fmt: skip
    pods.apply("ADDED", _pod("b", labels={"app": "driver", "pool": "x"}))
    pods.apply("ADDED", _pod("a", labels={"app": "driver"}))
    kube = Kube(Client(), informers=[pods])  # type: ignore[arg-type]

    async def reads() -> list[list[str]]:
        found: list[list[str]] = []
        for ns, labels, fields in (
            ("gpu-operator", {"app": "driver"}, None),  # not synced yet: the API answers
            ("gpu-operator", {"app": "driver"}, None),
            ("gpu-operator", {"app": "driver", "pool": None}, None),  # narrower: filtered here
            ("gpu-operator", {"app": "driver"}, {"spec.nodeName": "n1"}),  # field selectors: the API
            ("gpu-operator", {}, None),  # wider than the cache: the API
            ("other", {"app": "driver"}, None),
        ):
            if len(found) == 1:
                pods.synced.set()
            names = [p["metadata"]["name"] for p in await kube.list_objects("v1", "Pod", namespace=ns, labels=labels,
                                                                           fields=fields)]  # fmt: skip
            found.append(names)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("gpu_operator.kube.api.resource", lambda api, kind: kind)
        found = asyncio.run(reads())
    assert found == [[], ["a", "b"], ["b"], [], [], []]
    assert (kube.cached_reads, kube.requests, len(calls)) == (2, 4, 4)


class _Listing:
    def __init__(self, items: list[JSON], version: str) -> None:
        self.items, self.resource_version = items, version

    async def __aiter__(self) -> AsyncIterator[JSON]:
        for item in self.items:
            yield dict(item)


def test_a_broken_watch_lists_again_and_reports_what_changed_meanwhile() -> None:
    stop = asyncio.Event()
    lists = [[_node("n1"), _node("n2")], [_node("n2", labels={"team": "b"}), _node("n3")]]
    watched: list[str | None] = []

    class Client:
        def list_stream(self, api_version: str, kind: str, **kw: Any) -> _Listing:
            return _Listing(lists.pop(0), version=f"v{len(lists)}")

        async def watch(self, api_version: str, kind: str, *, resource_version: str, **kw: Any) -> AsyncIterator[Any]:
            watched.append(resource_version)
            if not lists:  # the second watch: the test has seen what it needs
                stop.set()
                return
            yield "MODIFIED", _node("n1", labels={"team": "a"})
            raise OSError("connection reset")  # the API server went away

    informer, seen = _informer(retry_seconds=0.0)
    informer.client = Client()  # type: ignore[assignment]
    asyncio.run(informer.run(stop=stop))
    assert watched == ["v1", "v0"]  # each watch starts at its own list's version
    assert informer.lists == 2
    assert sorted(n for _, n in informer.items) == ["n2", "n3"]
    changes = [((o or {}).get("metadata", {}).get("name"), (n or {}).get("metadata", {}).get("name")) for o, n in seen]
    assert changes == [(None, "n1"), (None, "n2"), ("n1", "n1"), ("n1", None), ("n2", "n2"), (None, "n3")]


def test_410_gone_lists_again_at_once_and_a_replaced_object_is_deleted_then_added() -> None:
    stop = asyncio.Event()
    lists = [[_node("n1", uid="old")], [_node("n1", uid="new")]]

    class Client:
        def list_stream(self, api_version: str, kind: str, **kw: Any) -> _Listing:
            return _Listing(lists.pop(0), version="v")

        async def watch(self, api_version: str, kind: str, *, resource_version: str, **kw: Any) -> AsyncIterator[Any]:
            if not lists:
                stop.set()
                return
            raise WatchExpiredError("too old")
            yield  # an async generator

    # A backoff of an hour: only a relist "at once" ends this test within its 2 s.
    informer, seen = _informer(retry_seconds=3600.0)
    informer.client = Client()  # type: ignore[assignment]
    asyncio.run(informer.run(stop=stop))
    assert informer.lists == 2
    uids = [((o or {}).get("metadata", {}).get("uid"), (n or {}).get("metadata", {}).get("uid")) for o, n in seen]
    assert uids == [(None, "old"), ("old", None), (None, "new")]


def test_a_throttled_watch_resumes_from_its_last_version_without_listing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 on a watch is the API server shedding load (CI saw one on a busy machine): listing every object
    again would add to that load and lose nothing less. The watch resumes after the server's wait."""
    stop = asyncio.Event()
    watched: list[str] = []
    delays: list[float] = []
    request = httpx.Request("GET", "https://api.invalid/api/v1/nodes?watch=true")
    throttled = httpx.HTTPStatusError(
        "429", request=request, response=httpx.Response(429, headers={"Retry-After": "7"}, request=request)
    )

    async def no_wait(awaitable: Any, timeout: float) -> None:
        delays.append(timeout)
        awaitable.close()

    class Client:
        def list_stream(self, api_version: str, kind: str, **kw: Any) -> _Listing:
            return _Listing([_node("n1")], version="10")

        async def watch(self, api_version: str, kind: str, *, resource_version: str, **kw: Any) -> AsyncIterator[Any]:
            watched.append(resource_version)
            if len(watched) == 1:
                raise throttled  # refused before it started
            stop.set()
            return
            yield  # an async generator

    monkeypatch.setattr(asyncio, "wait_for", no_wait)
    informer, _ = _informer(retry_seconds=1.0)
    informer.client = Client()  # type: ignore[assignment]
    asyncio.run(informer.run(stop=stop))
    # The throttled watch is tried again from the list's version after the 7 s the server asked for.
    assert watched == ["10", "10"]
    assert informer.lists == 1
    assert delays[0] == 7.0


def test_a_throttled_watch_resumes_at_the_last_event_or_bookmark(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = asyncio.Event()
    watched: list[str] = []
    request = httpx.Request("GET", "https://api.invalid/api/v1/nodes?watch=true")
    throttled = httpx.HTTPStatusError("429", request=request, response=httpx.Response(429, request=request))

    async def no_wait(awaitable: Any, timeout: float) -> None:
        awaitable.close()

    class Client:
        def list_stream(self, api_version: str, kind: str, **kw: Any) -> _Listing:
            return _Listing([_node("n1")], version="10")

        async def watch(self, api_version: str, kind: str, *, resource_version: str, **kw: Any) -> AsyncIterator[Any]:
            watched.append(resource_version)
            if len(watched) == 1:
                yield "MODIFIED", _node("n1", beat=2, labels={"team": "a"})  # resourceVersion "2"
                yield "BOOKMARK", {"metadata": {"resourceVersion": "15"}}
                raise throttled  # as if the stream broke and the server refused to go on
            stop.set()

    monkeypatch.setattr(asyncio, "wait_for", no_wait)
    informer, _ = _informer(retry_seconds=1.0)
    informer.client = Client()  # type: ignore[assignment]
    asyncio.run(informer.run(stop=stop))
    assert watched == ["10", "15"]
    assert informer.lists == 1
    assert informer.items[("", "n1")]["metadata"]["labels"]["team"] == "a"


def test_applied_hash_is_stable_and_changes_with_the_object() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}
    first, again = with_applied_hash(obj), with_applied_hash(dict(reversed(list(obj.items()))))
    assert applied_hash(first) == applied_hash(again) is not None
    assert applied_hash(with_applied_hash({**obj, "data": {"k": "w"}})) != applied_hash(first)
    assert applied_hash(obj) is None


def test_cache_metrics_say_what_each_cache_holds_and_how_often_it_listed() -> None:
    informer, _ = _informer()
    informer.apply("ADDED", _node("n1"))
    informer.apply("ADDED", _node("n2"))
    informer.lists = 3
    pods = Informer(None, "v1", "Pod", labels={"app": "nvidia-operator-validator"})  # type: ignore[arg-type]
    text = OperatorMetrics(caches=(informer, pods), cached_reads=7).render()
    assert "gpu_operator_cache_reads_total 7" in text
    assert 'gpu_operator_cache_objects{kind="Node",selector=""} 2' in text
    assert 'gpu_operator_cache_objects{kind="Pod",selector="app=nvidia-operator-validator"} 0' in text
    assert 'gpu_operator_cache_lists_total{kind="Node",selector=""} 3' in text


def test_caches_not_filled_in_time_are_reported_not_raised() -> None:
    """At 5,000 nodes on a saturated machine a restarted operator's first lists outlasted the sync
    timeout, and the cancelled wait surfaced as CancelledError: the operator process died. It must go
    on working without the missing caches."""

    async def scenario() -> bool:
        never = Informer(None, "v1", "Node")  # type: ignore[arg-type]  # never runs: never synced
        return await wait_synced([never], stop=asyncio.Event(), timeout=0)

    assert asyncio.run(scenario()) is False


def _retries(failures: list[Exception], monkeypatch: pytest.MonkeyPatch) -> tuple[Informer, list[float]]:
    """Run an informer whose lists raise ``failures`` in turn, then succeed; its first watch ends the run.
    Returns the informer and every delay it waited (nothing is slept)."""
    stop = asyncio.Event()
    delays: list[float] = []

    async def no_wait(awaitable: Any, timeout: float) -> None:
        delays.append(timeout)
        awaitable.close()

    class Client:
        def list_stream(self, api_version: str, kind: str, **kw: Any) -> _Listing:
            if failures:
                raise failures.pop(0)
            return _Listing([_node("n1")], version="v")

        async def watch(self, api_version: str, kind: str, *, resource_version: str, **kw: Any) -> AsyncIterator[Any]:
            stop.set()
            return
            yield  # an async generator

    monkeypatch.setattr(asyncio, "wait_for", no_wait)
    informer, _ = _informer(retry_seconds=1.0)
    informer.client = Client()  # type: ignore[assignment]
    asyncio.run(informer.run(stop=stop))
    return informer, delays


def test_an_unreachable_server_is_tried_every_second_and_does_not_grow_the_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outage must not leave the caches 30 s behind the API server's return (issue 22)."""
    failures: list[Exception] = [
        *(httpx.ConnectError("refused", request=httpx.Request("GET", "https://api.invalid/")) for _ in range(5)),
        RuntimeError("503: starting"),
        RuntimeError("503: starting"),
    ]
    informer, delays = _retries(failures, monkeypatch)
    # Five refused connections: 1 s each. The server's first answers start the doubling from 1 s, not 30 s;
    # the last wait is the one after the watch ended.
    assert delays == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0]
    assert informer.lists == 1


def test_server_errors_while_etcd_is_away_are_retried_within_two_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI saw a change reach its DaemonSet 7.6 s after an etcd restart (allowance 5 s): the caches' lists
    had failed with 5xx while etcd was away and their retry had doubled to 8 s."""
    request = httpx.Request("GET", "https://api.invalid/api/v1/nodes")

    def answer(status: int, **headers: str) -> httpx.HTTPStatusError:
        return httpx.HTTPStatusError(str(status), request=request,
                                     response=httpx.Response(status, headers=headers, request=request))  # fmt: skip

    failures: list[Exception] = [answer(500), answer(504), answer(503), answer(500), answer(500),
                                 answer(503, **{"Retry-After": "5"}), answer(403), answer(403)]  # fmt: skip
    _, delays = _retries(failures, monkeypatch)
    # 5xx: 1 s, then 2 s at most; a Retry-After of 5 s is kept; a refusal (403) doubles on (64 s capped at 30).
    assert delays[:8] == [1.0, 2.0, 2.0, 2.0, 2.0, 5.0, 30.0, 30.0]


def test_the_name_ordered_view_follows_every_change() -> None:
    informer, _ = _informer()
    for name in ("b", "c", "a"):
        informer.apply("ADDED", _node(name))
    assert [n["metadata"]["name"] for n in informer.select()] == ["a", "b", "c"]
    informer.select().clear()  # callers get their own list: the kept order is not theirs to change
    informer.apply("DELETED", _node("b"))
    informer.apply("ADDED", _node("aa"))
    informer.apply("MODIFIED", _node("c", labels={"team": "x"}))
    assert [n["metadata"]["name"] for n in informer.select()] == ["a", "aa", "c"]
    assert informer.select({"team": "x"})[0]["metadata"]["labels"]["team"] == "x"
