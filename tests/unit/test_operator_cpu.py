"""What keeps the operator's CPU per pass low without changing what it does: which informer changes wake
which key (a policy's own status write wakes nobody; a validator pod only while its node validates), the
owned kinds read from caches, the render reused while its inputs are equal, and the hashes and copies
that give the same answers as before."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.kube.api import Kube
from gpu_operator.reconcile import clusterpolicy
from gpu_operator.reconcile.caches import OWNED_KINDS, operator_informers
from gpu_operator.render import ClusterFacts, OperatorSettings, render
from gpu_operator.render.meta import HASH_ANNOTATION, content_hash, fnv32a, with_owner
from gpu_operator.upgrade.collect import api_seconds as _seconds

JSON = dict[str, Any]
NS = "gpu-operator"
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"


def _informers(woken: list[str]) -> Any:
    return operator_informers(
        None,
        namespace=NS,
        wake_all=lambda: woken.append("all"),
        wake_reconciler=lambda: woken.append("reconciler"),
        wake_upgrade=lambda: woken.append("up"),
    )


def _policy(*, version: str = "1", state: str | None = None, rv: str = "1") -> JSON:
    obj: JSON = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy", "uid": "u1", "generation": 1, "resourceVersion": rv},
        "spec": {
            "dcgmExporter": {"repository": "registry.example/nvidia", "image": "dcgm-exporter", "version": version}
        },
    }
    if state is not None:
        obj["status"] = {"state": state}
    return obj


def test_a_status_only_policy_change_wakes_nobody() -> None:
    woken: list[str] = []
    (policies,) = [i for i in _informers(woken) if i.kind == "ClusterPolicy"]
    policies.apply("ADDED", _policy())
    policies.apply("MODIFIED", _policy(state="notReady", rv="2"))  # the reconciler's own status write
    policies.apply("MODIFIED", _policy(state="ready", rv="3"))
    assert woken == ["all"]
    policies.apply("MODIFIED", _policy(version="2", state="ready", rv="4"))  # a spec change
    policies.apply("DELETED", _policy(version="2", state="ready", rv="5"))
    assert woken == ["all", "all", "all"]


def _validator(node: str, *, ready: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"validator-{node}", "namespace": NS, "uid": f"v-{node}",
                     "labels": {"app": "nvidia-operator-validator"}},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }  # fmt: skip


def _node(name: str, state: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": name, "labels": {UPGRADE_STATE: state}},
    }


def test_a_validator_pod_wakes_the_upgrade_controller_only_while_its_node_validates() -> None:
    woken: list[str] = []
    informers = _informers(woken)
    (nodes,) = [i for i in informers if i.kind == "Node"]
    validators = next(i for i in informers if i.kind == "Pod" and i.labels.get("app") == "nvidia-operator-validator")
    nodes.apply("ADDED", _node("done", "upgrade-done"))
    nodes.apply("ADDED", _node("validating", "validation-required"))
    woken.clear()
    validators.apply("ADDED", _validator("done", ready="False"))
    validators.apply("MODIFIED", _validator("done", ready="True"))
    validators.apply("ADDED", _validator("nowhere", ready="True"))
    assert woken == []
    validators.apply("ADDED", _validator("validating", ready="False"))
    validators.apply("MODIFIED", _validator("validating", ready="True"))
    assert woken == ["up", "up"]


def test_the_owned_kinds_are_served_from_caches() -> None:
    informers = _informers([])
    kube = Kube(None, informers=informers)  # type: ignore[arg-type]
    for informer in informers:
        informer.synced.set()
    for api_version, kind, namespaced in OWNED_KINDS:
        served = kube._informer(
            api_version, kind, namespace=NS if namespaced else None, labels={"nvidia.com/gpu-operator.state": None}
        )
        assert served is not None, kind


def test_the_render_is_reused_while_spec_facts_and_settings_are_equal() -> None:
    clusterpolicy._last_render.clear()
    policy_json = _policy()
    policy = ClusterPolicy.model_validate(policy_json)
    facts, settings = ClusterFacts(namespace=NS), OperatorSettings()
    first = clusterpolicy._render(policy, policy_json["spec"], facts, operator=settings)
    assert first == render(policy, facts, operator=settings)
    again = clusterpolicy._render(policy, copy.deepcopy(policy_json["spec"]), facts, operator=settings)
    assert [s.objects for s in again] == [s.objects for s in first]
    assert all(a is b for a, b in zip(again, first, strict=True))  # not rendered again
    changed = _policy(version="2")
    other = clusterpolicy._render(ClusterPolicy.model_validate(changed), changed["spec"], facts, operator=settings)
    assert other == render(ClusterPolicy.model_validate(changed), facts, operator=settings)
    assert other != first
    clusterpolicy._last_render.clear()


def _slow_content_hash(obj: JSON) -> str:
    body = copy.deepcopy(obj)
    annotations = body.get("metadata", {}).get("annotations")
    if annotations:
        annotations.pop(HASH_ANNOTATION, None)
    return f"{fnv32a(json.dumps(body, sort_keys=True, separators=(',', ':')).encode()):08x}"


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"name": "a"}, "spec": {"x": [1, 2]}},
        {"metadata": {"name": "a", "annotations": {HASH_ANNOTATION: "0"}}},
        {"metadata": {"name": "a", "annotations": {HASH_ANNOTATION: "0", "b": "c"}}},
        {"metadata": {"name": "a", "annotations": None}},
        {"kind": "X"},
    ],
)
def test_the_content_hash_is_unchanged_and_leaves_the_object_alone(obj: JSON) -> None:
    before = copy.deepcopy(obj)
    assert content_hash(obj) == _slow_content_hash(obj) == content_hash(obj)  # twice: the memo answers alike
    assert obj == before


def test_with_owner_leaves_the_rendered_object_alone() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {}}
    before = copy.deepcopy(obj)
    owned = with_owner(obj, owner=_policy())
    assert owned["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert obj == before


def test_timestamps_read_as_utc() -> None:
    assert _seconds("1970-01-01T00:01:00Z") == 60.0
    assert _seconds(None) == 0.0
    assert _seconds("") == 0.0


def test_a_crd_answer_is_reused_only_within_max_age(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(None)  # type: ignore[arg-type]
    asked: list[str] = []
    installed = {"a.example": True}

    async def get(api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None:
        asked.append(name)
        return {"metadata": {"name": name}} if installed.get(name) else None

    monkeypatch.setattr(kube, "get", get)

    async def reads() -> list[bool]:
        out = [await kube.crd_exists("a.example", max_age=60)]
        installed["a.example"] = False
        out.append(await kube.crd_exists("a.example", max_age=60))  # reused
        out.append(await kube.crd_exists("a.example"))  # read again
        return out

    assert asyncio.run(reads()) == [True, True, False]
    assert asked == ["a.example", "a.example"]


def test_an_apply_answered_404_forgets_the_cached_crd_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(None)  # type: ignore[arg-type]
    installed = {"servicemonitors.monitoring.coreos.com": True}

    async def get(api_version: str, kind: str, name: str, *, namespace: str | None = None) -> JSON | None:
        return {"metadata": {"name": name}} if installed.get(name) else None

    class Client:
        async def apply(self, obj: Any, **_: Any) -> Any:
            raise ApiError(status=Status(code=404, message="the server could not find the requested resource"))

    monkeypatch.setattr(kube, "get", get)
    kube.client = Client()  # type: ignore[assignment]
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "m"}}

    async def scenario() -> list[bool]:
        crd = "servicemonitors.monitoring.coreos.com"
        out = [await kube.crd_exists(crd, max_age=60)]
        installed.clear()  # the CRD is deleted; the cached answer still says installed
        with pytest.raises(ApiError):
            await kube.apply(monitor)
        out.append(await kube.crd_exists(crd, max_age=60))  # asked again: the next pass skips the kind
        return out

    assert asyncio.run(scenario()) == [True, False]


def test_an_unchanged_rendered_object_is_owned_and_hashed_once() -> None:
    obj: JSON = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}, "data": {}}
    owner = _policy()
    first = clusterpolicy._desired_of(obj, owner=owner)
    assert clusterpolicy._desired_of(obj, owner=owner) is first  # the same rendered object: reused
    assert first["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert first["metadata"]["annotations"]  # stamped with the applied hash
    assert "ownerReferences" not in obj["metadata"]  # the render's own object is left alone
    other = {**owner, "metadata": {**owner["metadata"], "uid": "u2"}}
    assert clusterpolicy._desired_of(obj, owner=other)["metadata"]["ownerReferences"][0]["uid"] == "u2"
    equal = copy.deepcopy(obj)  # an equal but new object (a new render): made anew
    assert clusterpolicy._desired_of(equal, owner=owner) is not first
    assert clusterpolicy._desired_of(equal, owner=owner) == first
