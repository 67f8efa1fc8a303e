"""The startup taint (our extension ``startupTaint``): every operand tolerates it, and the reconciler lifts it
from a GPU node only once that node's validator pod is Ready, keeping every other taint, never from a node
without a GPU or with a validator not Ready, and never over a change another writer made meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.kube.informer import Informer
from gpu_operator.names.keys import REMEDIATION_TAINT, STARTUP_TAINT
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.startuptaint import EVENT_REASON, lift_plan, lift_startup_taints
from gpu_operator.render import ClusterFacts, OperatorSettings, render
from gpu_operator.render.pods import with_toleration

JSON = dict[str, Any]
NS = "gpu-operator"
HELD = {"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"}
OTHER = {"key": "example.com/team", "value": "ml", "effect": "PreferNoSchedule"}
ON = ClusterPolicySpec.model_validate({"startupTaint": {"enabled": True}})


def _node(name: str, *, taints: list[JSON], gpu: bool = True) -> JSON:
    labels = {"nvidia.com/gpu.present": "true" if gpu else "false"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
            "spec": {"taints": taints}}  # fmt: skip


def _validator(node: str, *, ready: bool = True, deleting: bool = False) -> JSON:
    meta: JSON = {"name": f"validator-{node}", "namespace": NS, "labels": {"app": "nvidia-operator-validator"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    spec = {"nodeName": node, "containers": [{"name": "validator", "image": "v:1"}]}
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def test_only_validated_gpu_nodes_are_lifted_and_other_taints_stay() -> None:
    nodes = [
        _node("passed", taints=[OTHER, HELD]),
        _node("waiting", taints=[HELD]),
        _node("deleting", taints=[HELD]),
        _node("cpu", taints=[HELD], gpu=False),
        _node("free", taints=[OTHER]),
    ]
    validators = [_validator("passed"), _validator("waiting", ready=False), _validator("deleting", deleting=True),
                  _validator("cpu"), _validator("free")]  # fmt: skip
    plan = lift_plan(nodes=nodes, validators=validators, key=STARTUP_TAINT)
    assert [(lift.node["metadata"]["name"], lift.kept) for lift in plan] == [("passed", [OTHER])]
    assert plan[0].taints == [OTHER, HELD]
    other_key = lift_plan(nodes=nodes, validators=validators, key="example.com/team")
    assert [lift.node["metadata"]["name"] for lift in other_key] == ["passed", "free"]


def _run(api: FakeApi, spec: ClusterPolicySpec) -> int:
    async def run() -> int:
        client = api.client()
        try:
            kube = Kube(client)
            nodes = await kube.list_objects("v1", "Node")
            return await lift_startup_taints(kube, nodes=nodes, spec=spec, namespace=NS)
        finally:
            await client.close()

    return asyncio.run(run())


def _api() -> FakeApi:
    api = FakeApi()
    api.put(_node("gpu-1", taints=[HELD, OTHER]), plural="nodes")
    api.put(_node("gpu-2", taints=[HELD]), plural="nodes")
    api.put(_validator("gpu-1"), plural="pods")
    api.put(_validator("gpu-2", ready=False), plural="pods")
    return api


def _taints(api: FakeApi, name: str) -> list[JSON]:
    node = api.get("v1", "nodes", name) or {}
    return list(node["spec"]["taints"])


def test_the_reconciler_lifts_the_taint_with_an_event_and_leaves_the_rest() -> None:
    api = _api()
    assert _run(api, ON) == 1
    assert _taints(api, "gpu-1") == [OTHER]
    assert _taints(api, "gpu-2") == [HELD]  # its validator is not Ready yet
    events = [o for k, o in api.objects.items() if k[1] == "events"]
    assert [(e["reason"], e["involvedObject"]["name"]) for e in events] == [(EVENT_REASON, "gpu-1")]
    assert _run(api, ON) == 0  # nothing left to lift: no request at all
    assert _run(_api(), ClusterPolicySpec()) == 0  # the extension is off by default


def test_a_node_changed_since_it_was_read_keeps_its_taints_until_the_next_pass() -> None:
    api = _api()

    async def run() -> int:
        client = api.client()
        try:
            kube = Kube(client)
            nodes = await kube.list_objects("v1", "Node")
            # Another writer adds a taint between the read and the patch: the test operation fails (422).
            api.put(_node("gpu-1", taints=[HELD, OTHER, {"key": "late", "effect": "NoSchedule"}]), plural="nodes")
            return await lift_startup_taints(kube, nodes=nodes, spec=ON, namespace=NS)
        finally:
            await client.close()

    assert asyncio.run(run()) == 0
    assert _taints(api, "gpu-1") == [HELD, OTHER, {"key": "late", "effect": "NoSchedule"}]  # nothing lost
    assert _run(api, ON) == 1
    assert _taints(api, "gpu-1") == [OTHER, {"key": "late", "effect": "NoSchedule"}]


def test_an_api_failure_is_raised_for_the_loop_to_retry() -> None:
    api = _api()
    api.fail(path="/api/v1/nodes/gpu-1", method="PATCH", status=500)
    with pytest.raises(Exception, match=r"injected fault"):
        _run(api, ON)
    assert _taints(api, "gpu-1") == [HELD, OTHER]


def test_every_operand_tolerates_the_taint_only_when_it_is_on() -> None:
    facts = ClusterFacts(namespace=NS, gpu_node_count=2, os_tag="ubuntu22.04", has_nfd_labels=True)
    settings = OperatorSettings(agent_image="agent:1")

    def daemonsets(spec: JSON) -> list[JSON]:
        policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
        states = render(policy, facts, operator=settings)
        return [o for s in states for o in s.objects if o["kind"] == "DaemonSet"]

    wanted = {"key": STARTUP_TAINT, "operator": "Exists"}
    on = daemonsets({"startupTaint": {"enabled": True}})
    assert len(on) >= 6
    assert all(_tolerated(ds, STARTUP_TAINT) for ds in on), [ds["metadata"]["name"] for ds in on]
    assert not any(wanted in ds["spec"]["template"]["spec"]["tolerations"] for ds in daemonsets({}))
    custom = daemonsets({"startupTaint": {"enabled": True, "key": "example.com/not-validated"},
                         "daemonsets": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}})  # fmt: skip
    for ds in custom:
        tolerations = ds["spec"]["template"]["spec"]["tolerations"]
        assert _tolerated(ds, "example.com/not-validated"), ds["metadata"]["name"]
        assert {"key": "dedicated", "operator": "Exists"} in tolerations or {"operator": "Exists"} in tolerations


def _tolerated(ds: JSON, key: str) -> bool:
    tolerations = ds["spec"]["template"]["spec"]["tolerations"]
    return {"key": key, "operator": "Exists"} in tolerations or {"operator": "Exists"} in tolerations


def test_a_toleration_of_everything_is_not_repeated() -> None:
    assert with_toleration([{"operator": "Exists"}], key=STARTUP_TAINT) == [{"operator": "Exists"}]
    mine = [{"key": STARTUP_TAINT, "operator": "Exists"}]
    assert with_toleration(mine, key=STARTUP_TAINT) == mine
    narrow = [{"key": STARTUP_TAINT, "operator": "Exists", "effect": "NoExecute"}]  # not every effect: add one
    assert with_toleration(narrow, key=STARTUP_TAINT) == [*narrow, {"key": STARTUP_TAINT, "operator": "Exists"}]


def test_a_validator_becoming_ready_on_a_tainted_node_wakes_the_reconciler() -> None:
    woken: list[str] = []
    informers = operator_informers(
        FakeApi().client(), namespace=NS, wake_all=lambda: woken.append("all"),
        wake_reconciler=lambda: woken.append("reconciler"), wake_upgrade=lambda: woken.append("up"),
    )  # fmt: skip
    nodes = next(i for i in informers if i.kind == "Node")
    validators = _validators(informers)
    nodes.apply("ADDED", _node("gpu-1", taints=[HELD]))
    nodes.apply("ADDED", _node("gpu-2", taints=[]))
    woken.clear()
    validators.apply("ADDED", _validator("gpu-1", ready=False))
    validators.apply("ADDED", _validator("gpu-2", ready=False))
    validators.apply("MODIFIED", _validator("gpu-2"))  # no taint on its node: nothing to lift
    assert woken == []
    validators.apply("MODIFIED", _validator("gpu-1"))
    assert woken == ["reconciler"]


def _validators(informers: tuple[Informer, ...]) -> Informer:
    return next(i for i in informers if i.kind == "Pod" and "nvidia-operator-validator" in i.labels.values())


def test_a_node_for_vms_is_lifted_once_its_sandbox_validator_is_ready() -> None:
    api = FakeApi()
    api.put(_node("vm-1", taints=[HELD]), plural="nodes")
    sandbox = _validator("vm-1")
    sandbox["metadata"].update(name="sandbox-validator-vm-1", labels={"app": "nvidia-sandbox-validator"})
    api.put(sandbox, plural="pods")
    assert _run(api, ON) == 0  # sandbox workloads off: that pod is not a validator of this policy
    both = ClusterPolicySpec.model_validate({"startupTaint": {"enabled": True}, "sandboxWorkloads": {"enabled": True}})
    assert _run(api, both) == 1
    assert _taints(api, "vm-1") == []


def test_with_remediation_on_every_operand_tolerates_the_remediation_taint() -> None:
    """A node in remediation keeps its operands: a reset restarts the driver pod there (found on sim nodes)."""
    facts = ClusterFacts(namespace=NS, gpu_node_count=2, os_tag="ubuntu22.04", has_nfd_labels=True)
    settings = OperatorSettings(agent_image="agent:1")

    def daemonsets(spec: JSON) -> list[JSON]:
        policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
        return [o for s in render(policy, facts, operator=settings) for o in s.objects if o["kind"] == "DaemonSet"]

    on = daemonsets({"remediation": {"enabled": True}})
    assert len(on) >= 6
    assert all(_tolerated(ds, REMEDIATION_TAINT) for ds in on), [ds["metadata"]["name"] for ds in on]
    assert not any(_tolerated(ds, REMEDIATION_TAINT) for ds in daemonsets({}))
