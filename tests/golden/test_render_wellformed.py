"""Every object of every golden scenario is a well-formed Kubernetes object.

Built-in kinds are parsed by lightkube's models and must survive a round trip unchanged: a misspelt
or misplaced field is dropped by the models, so the round trip shows it. Beyond the schema: names
and label values are valid, mounts name existing volumes, names are unique where the API server
requires it, and every object carries the operator's labels and content hash.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from lightkube import codecs
from lightkube.generic_resource import create_namespaced_resource

from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render.catalog import STATES
from gpu_operator.render.meta import HASH_ANNOTATION, MANAGED_BY, PART_OF, STATE_LABEL
from tests.golden.test_render_golden import SCENARIOS, Scenario, rendered_objects

# The Prometheus Operator's kind is not in lightkube-models: register it as a generic resource.
create_namespaced_resource("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors")

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ALL = [(s, i, o) for s in SCENARIOS for i, o in enumerate(rendered_objects(s))]


def _id(entry: tuple[Scenario, int, dict[str, Any]]) -> str:
    scenario, index, obj = entry
    return f"{scenario.name}-{index}-{obj['kind']}-{obj['metadata']['name']}"


@pytest.mark.parametrize("entry", ALL, ids=[_id(e) for e in ALL])
def test_object_round_trips_through_the_kubernetes_models(entry: tuple[Scenario, int, dict[str, Any]]) -> None:
    _, _, obj = entry
    parsed: Any = codecs.from_dict(obj)  # lightkube's to_dict is untyped
    assert parsed.to_dict() == obj


@pytest.mark.parametrize("entry", ALL, ids=[_id(e) for e in ALL])
def test_object_metadata(entry: tuple[Scenario, int, dict[str, Any]]) -> None:
    _, _, obj = entry
    meta = obj["metadata"]
    assert DNS_SUBDOMAIN.match(meta["name"])
    assert len(meta["name"]) <= 253
    labels = meta["labels"]
    assert labels[PART_OF] == "gpu-operator"
    assert labels[MANAGED_BY] == "gpu-operator"
    assert labels[STATE_LABEL] in STATES
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in labels.values())
    assert re.fullmatch(r"[0-9a-f]{8}", meta["annotations"][HASH_ANNOTATION])


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"]["template"]["spec"])


DAEMONSETS = [e for e in ALL if e[2]["kind"] == "DaemonSet"]


@pytest.mark.parametrize("entry", DAEMONSETS, ids=[_id(e) for e in DAEMONSETS])
def test_daemonset_pod_is_consistent(entry: tuple[Scenario, int, dict[str, Any]]) -> None:
    _, _, ds = entry
    assert len(ds["metadata"]["name"]) <= 63  # pod names are derived from it
    pod = _pod(ds)
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    names = [c["name"] for c in containers]
    assert len(names) == len(set(names))
    assert all(DNS_LABEL.match(n) for n in names)
    volumes = [v["name"] for v in pod.get("volumes", [])]
    assert len(volumes) == len(set(volumes))
    for c in containers:
        ours = c.get("command", [])[:2] == ["gpu-operator", "agent"]
        if ours:
            # The agent must exist in the image: `gpu-operator agent NAME` with an unknown NAME never starts.
            assert c["command"][2] in PROGRAMS, f"{c['name']} runs agent {c['command'][2]!r}, which does not exist"
        else:
            # Only a DaemonSet that chose NVIDIA's contract runs NVIDIA's programs (a mix is allowed:
            # its validation and manager init containers follow their own sections).
            assert ds["metadata"]["annotations"][IMPLEMENTATION] == "nvidia", c["name"]
        env = [e["name"] for e in c.get("env", [])]
        assert len(env) == len(set(env)), f"{c['name']}: duplicate env {env}"
        if ours:
            assert {"NODE_NAME", "HOST_ROOT"} <= set(env)
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']} mounts unknown volume {m['name']}"
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert any(k.startswith("nvidia.com/gpu.deploy.") for k in pod["nodeSelector"])
    assert pod["tolerations"]
