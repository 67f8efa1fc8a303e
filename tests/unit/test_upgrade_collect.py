"""Turning API objects into upgrade snapshots: driver pods in sync or not, partitions per policy."""

from __future__ import annotations

from typing import Any

from gpu_operator.names.pods import pod_view
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.collect import (
    CLUSTER_POLICY,
    Cluster,
    driver_view,
    newest_revisions,
    partitions,
)

JSON = dict[str, Any]


def _ds(name: str, uid: str, *, version: str, digest: str) -> JSON:
    env = [{"name": "DRIVER_VERSION", "value": version}, {"name": "DRIVER_CONFIG_DIGEST", "value": digest}]
    template = {"spec": {"containers": [{"name": "nvidia-driver-ctr", "env": env}]}}
    return {"metadata": {"name": name, "uid": uid}, "spec": {"template": template}}


def _pod(name: str, node: str, *, ds_uid: str | None, hash_: str, version: str, digest: str, cr: str = "") -> JSON:
    labels = {"controller-revision-hash": hash_, **({"nvidia.com/gpu-operator.driver": cr} if cr else {})}
    owners = [{"kind": "DaemonSet", "uid": ds_uid, "controller": True}] if ds_uid else []
    env = [{"name": "DRIVER_VERSION", "value": version}, {"name": "DRIVER_CONFIG_DIGEST", "value": digest}]
    return {
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels, "ownerReferences": owners,
                     "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"nodeName": node, "containers": [{"name": "nvidia-driver-ctr", "env": env}]},
        "status": {
            "phase": "Running", "startTime": "2026-11-30T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:02:30Z"}],
            "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": True, "restartCount": 0}],
        },
    }  # fmt: skip


def test_newest_revision_decides_whether_a_pod_is_in_sync() -> None:
    owner = [{"uid": "ds1", "controller": True}]
    revisions = [
        {"metadata": {"labels": {"controller-revision-hash": h}, "ownerReferences": owner}, "revision": r}
        for h, r in (("old", 1), ("new", 2))
    ]
    assert newest_revisions(revisions) == {"ds1": "new"}
    ds = _ds("nvidia-driver-daemonset", "ds1", version="580", digest="d2")
    stale = driver_view(
        _pod("p", "n1", ds_uid="ds1", hash_="old", version="570", digest="d1"), daemonset=ds, newest_hash="new"
    )
    assert (stale.in_sync, stale.same_config, stale.version, stale.target_version) == (False, False, "570", "580")
    assert stale.startup_seconds == 150.0  # start to Ready: what the preview uses as install time
    restart_only = driver_view(_pod("p", "n1", ds_uid="ds1", hash_="old", version="580", digest="d2"), daemonset=ds,
                               newest_hash="new")  # fmt: skip
    assert restart_only.same_config
    assert not restart_only.in_sync
    orphan = driver_view(
        _pod("p", "n1", ds_uid=None, hash_="x", version="570", digest="d1"), daemonset=None, newest_hash=None
    )
    assert orphan.orphan
    assert not orphan.in_sync


def node(name: str, labels: dict[str, str]) -> JSON:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {}}


def test_partitions_follow_the_nvidiadriver_label_and_the_owner_label() -> None:
    ds = _ds("d", "ds1", version="580", digest="x")
    a = driver_view(_pod("a", "n1", ds_uid="ds1", hash_="h", version="580", digest="x"), daemonset=ds, newest_hash="h")
    b = driver_view(_pod("b", "n2", ds_uid="ds1", hash_="h", version="580", digest="x", cr="pool-b"), daemonset=ds,
                    newest_hash="h")  # fmt: skip
    cluster = Cluster(
        nodes={
            "n1": node("n1", {}),
            "n2": node("n2", {}),
            # no driver pod right now (mid-restart), but labelled: stays in its NVIDIADriver's partition
            "n3": node("n3", {m.STATE_LABEL: m.POD_RESTART, "nvidia.com/gpu-operator.driver.owner": "pool-b"}),
            "n4": node("n4", {}),  # no driver, no label: not managed
        },
        drivers={"n1": (CLUSTER_POLICY, a), "n2": ("pool-b", b)},
    )
    assert partitions(cluster) == [CLUSTER_POLICY, "pool-b"]
    assert [v.name for v in cluster.views(CLUSTER_POLICY)] == ["n1"]
    views = cluster.views("pool-b")
    assert [v.name for v in views] == ["n2", "n3"]
    assert views[1].driver is None
    assert not views[1].pods_known


def test_pod_view_flags() -> None:
    pod = {
        "metadata": {"name": "x", "namespace": "w", "annotations": {"kubernetes.io/config.mirror": "1"},
                     "deletionTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}],
                 "volumes": [{"name": "scratch", "emptyDir": {}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    view = pod_view(pod)
    assert (view.gpu, view.mirror, view.terminating, view.empty_dir, view.owner_kind) == (True, True, True, True, "")


def _init(name: str, state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "state": state, "lastState": last or {}, "ready": False, "restartCount": 1 if last else 0}


def test_pod_view_says_how_an_init_container_last_failed() -> None:
    passed = _init("driver-validation", {"terminated": {"exitCode": 0, "reason": "Completed"}})
    message = "agent validator: cuda validation failed 3 times in a row,\n 5 s apart: no libcuda"
    gave_up = {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}
    cases = [
        ([passed, _init("cuda-validation", {"waiting": {"reason": "CrashLoopBackOff"}}, gave_up)],
         "cuda-validation exited 1: agent validator: cuda validation failed 3 times in a row, 5 s apart: no libcuda"),
        ([passed, _init("cuda-validation", gave_up)],
         "cuda-validation exited 1: agent validator: cuda validation failed 3 times in a row, 5 s apart: no libcuda"),
        ([_init("toolkit-validation", {"terminated": {"exitCode": 2, "reason": "Error"}})],
         "toolkit-validation exited 2: Error"),
        ([passed, _init("cuda-validation", {"running": {}})], ""),  # still checking, never failed
        ([passed, passed], ""),
        ([], ""),
    ]  # fmt: skip
    for statuses, expected in cases:
        pod = {"metadata": {"name": "v", "namespace": "gpu-operator"}, "spec": {},
               "status": {"phase": "Pending", "initContainerStatuses": statuses}}  # fmt: skip
        assert pod_view(pod).init_failure == expected, statuses
