"""DaemonSet readiness by upstream's rules, including OnDelete drivers judged by pod revisions."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.observe.readiness import daemonset_readiness, newest_revision_hash, state_readiness


def ds(*, strategy: str = "RollingUpdate", status: dict[str, int] | None = None, **counts: int) -> dict[str, Any]:
    base = {"desiredNumberScheduled": 3, "numberUnavailable": 0, "observedGeneration": 2, "updatedNumberScheduled": 3,
            "numberAvailable": 3}  # fmt: skip
    base.update({**(status or {}), **counts})
    return {
        "metadata": {"name": "nvidia-driver-daemonset", "generation": 2, "uid": "ds-uid"},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": base,
    }


def pod(
    name: str, revision: str, *, phase: str = "Running", ready: bool = True, owner: str = "ds-uid"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"controller-revision-hash": revision},
                     "ownerReferences": [{"uid": owner}]},
        "status": {"phase": phase, "containerStatuses": [{"ready": ready}, {"ready": True}]},
    }  # fmt: skip


def revision(number: int, hash_: str, *, owner: str = "ds-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": f"nvidia-driver-daemonset-{hash_}", "labels": {"controller-revision-hash": hash_},
                     "ownerReferences": [{"uid": owner}]},
        "revision": number,
    }  # fmt: skip


def test_no_node_selected_is_ready() -> None:
    assert daemonset_readiness(ds(desiredNumberScheduled=0, numberUnavailable=5)).ready


def test_unavailable_pods_are_not_ready() -> None:
    result = daemonset_readiness(ds(numberUnavailable=1))
    assert not result.ready
    assert result.reason == "nvidia-driver-daemonset: 1 of 3 pods unavailable"


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ({"observedGeneration": 1}, "has not observed the latest spec"),
        ({"updatedNumberScheduled": 2}, "2 of 3 pods updated"),
        ({"numberAvailable": 2}, "2 of 3 pods available"),
    ],
)
def test_rolling_update_rules(status: dict[str, int], reason: str) -> None:
    result = daemonset_readiness(ds(status=status))
    assert not result.ready
    assert reason in result.reason


def test_rolling_update_ready() -> None:
    assert daemonset_readiness(ds()).ready


def test_on_delete_needs_every_pod_on_the_newest_revision() -> None:
    revisions = [revision(1, "old"), revision(3, "new"), revision(2, "mid"), revision(9, "x", owner="other")]
    assert newest_revision_hash("nvidia-driver-daemonset", revisions, uid="ds-uid") == "new"
    live = ds(strategy="OnDelete", updatedNumberScheduled=0)  # counters do not matter for OnDelete
    ready = [pod("a", "new"), pod("b", "new"), pod("stranger", "old", owner="other")]
    assert daemonset_readiness(live, pods=ready, revisions=revisions).ready
    stale = daemonset_readiness(live, pods=[pod("a", "new"), pod("b", "old")], revisions=revisions)
    assert not stale.ready
    assert "pod b runs an old template" in stale.reason


@pytest.mark.parametrize(
    ("pod_", "reason"),
    [(pod("a", "new", phase="Pending"), "pod a is Pending"), (pod("a", "new", ready=False), "not ready")],
)
def test_on_delete_pods_must_run_and_be_ready(pod_: dict[str, Any], reason: str) -> None:
    result = daemonset_readiness(ds(strategy="OnDelete"), pods=[pod_], revisions=[revision(1, "new")])
    assert not result.ready
    assert reason in result.reason


def test_on_delete_without_pods_is_not_ready() -> None:
    assert not daemonset_readiness(ds(strategy="OnDelete"), pods=[], revisions=[revision(1, "new")]).ready


def test_revision_hash_from_the_name_when_unlabelled() -> None:
    rev = {"metadata": {"name": "nvidia-driver-daemonset-7f9c"}, "revision": 1}
    assert newest_revision_hash("nvidia-driver-daemonset", [rev]) == "7f9c"


def test_state_readiness_combines_daemonsets() -> None:
    result = state_readiness({"a": ds(), "b": None, "c": ds(numberAvailable=1)})
    assert not result.ready
    assert result.reason == "b: not created yet; nvidia-driver-daemonset: 1 of 3 pods available"
    assert state_readiness({}).ready
