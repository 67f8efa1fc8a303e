"""Reading pod specs like a kubelet: commands naming our programs, containers, requests, env resolution."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gpu_operator.sim.kubelet.podspec import (
    container_env,
    containers,
    extended_requests,
    field_value,
    referenced_objects,
    restart_policy,
)
from gpu_operator.sim.programs.programs import default_registry, parse_command


def _pod(**spec: Any) -> dict[str, Any]:
    meta = {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}, "annotations": {"a": "b"}}
    return {"metadata": meta, "spec": {"nodeName": "n1", **spec}}


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (["gpu-operator", "agent", "device-plugin"], ["--x"], ("device-plugin", ("--x",))),
        (["/usr/bin/gpu-operator"], ["agent", "gfd", "a"], ("gfd", ("a",))),
        (["gpu-operator", "operator"], ["--leader-elect"], ("operator", ("--leader-elect",))),
        (["/bin/gpu-operator", "agent"], [], None),
        (["gpu-operator", "render"], [], None),
        (["nginx"], [], None),
        ([], [], None),
    ],
)
def test_parse_command(command: list[str], args: list[str], expected: tuple[str, tuple[str, ...]] | None) -> None:
    assert parse_command(command=command, args=args) == expected


def test_registry_holds_builtins_and_registrations() -> None:
    registry = default_registry()
    assert {"sleep", "fail", "ready-after"} <= set(registry.names())

    def threaded(ctx: Any) -> None:
        return None

    registry.register_program("t", threaded)
    spec = registry.get("t")
    assert spec is not None
    assert spec.threaded
    sleep = registry.get("sleep")
    assert sleep is not None
    assert not sleep.threaded
    other = registry.copy()
    registry.unregister_program("t")
    assert registry.get("t") is None
    assert other.get("t") is not None
    with pytest.raises(ValueError, match="invalid program name"):
        registry.register_program("a/b", threaded)


def test_containers_in_start_order_with_sidecars() -> None:
    pod = _pod(
        initContainers=[{"name": "i1", "image": "x"}, {"name": "side", "image": "x", "restartPolicy": "Always"}],
        containers=[{"name": "c1", "image": "x", "command": ["a"], "args": ["b"]}],
        restartPolicy="OnFailure",
    )
    specs = containers(pod)
    assert [(s.name, s.init, s.sidecar) for s in specs] == [
        ("i1", True, False),
        ("side", True, True),
        ("c1", False, False),
    ]
    assert (specs[2].command, specs[2].args) == (("a",), ("b",))
    assert restart_policy(pod) == "OnFailure"
    assert restart_policy(_pod()) == "Always"


def test_extended_requests() -> None:
    pod = _pod(
        containers=[
            {
                "name": "c",
                "resources": {
                    "limits": {"nvidia.com/gpu": "2", "cpu": "1", "hugepages-2Mi": "1Gi"},
                    "requests": {"example.com/x": 1},
                },
            }
        ]
    )
    assert extended_requests(containers(pod)[0]) == {"nvidia.com/gpu": 2, "example.com/x": 1}


def test_env_resolution() -> None:
    env_spec = [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
        {"name": "SEC", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k", "optional": True}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
        {"name": "MSG", "value": "$(NODE)/$(UNKNOWN)/$$(NODE)"},
    ]
    container = {
        "name": "c",
        "env": env_spec,
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "P_"}],
        "resources": {"limits": {"memory": "1Gi"}},
    }
    pod = _pod(containers=[container])
    objects = {
        ("ConfigMap", "cm"): {"kind": "ConfigMap", "data": {"k": "v"}},
        ("Secret", "s"): {"kind": "Secret", "data": {"pw": base64.b64encode(b"hunter2").decode()}},
    }
    assert referenced_objects(pod) == {("ConfigMap", "cm"), ("Secret", "s"), ("ConfigMap", "missing")}
    env = container_env(
        pod=pod, container=containers(pod)[0], objects=objects, host_ip="1.2.3.4", pod_ip="10.0.0.5", base={"BASE": "1"}
    )
    assert env == {
        "BASE": "1",
        "P_k": "v",
        "NODE": "n1",
        "IP": "10.0.0.5",
        "APP": "x",
        "CM": "v",
        "SEC": "hunter2",
        "MEM": "1Gi",
        "MSG": "n1/$(UNKNOWN)/$(NODE)",
    }


def test_missing_required_reference_names_it() -> None:
    pod = _pod(
        containers=[{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]
    )
    with pytest.raises(KeyError, match="secret 's' has no key 'k'"):
        container_env(pod=pod, container=containers(pod)[0], objects={}, host_ip="", pod_ip="", base={})


def test_field_values() -> None:
    pod = _pod()
    assert field_value(pod, "metadata.uid", host_ip="h", pod_ip="p") == "u1"
    assert field_value(pod, "status.hostIP", host_ip="h", pod_ip="p") == "h"
    assert field_value(pod, "metadata.annotations", host_ip="h", pod_ip="p") == 'a="b"'
    with pytest.raises(ValueError, match="unsupported fieldRef"):
        field_value(pod, "spec.containers", host_ip="h", pod_ip="p")
