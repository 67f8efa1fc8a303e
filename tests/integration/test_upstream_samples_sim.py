"""Upstream's v26.7 sample ClusterPolicy and sample NVIDIADriver: validate, render, install and run.

The fixtures under ``tests/data/upstream`` hold the field paths and values of NVIDIA GPU Operator
v26.7.0's ``config/samples`` (written for these tests, not copied). Both must validate with no error
(the code behind ``gpu-operator validate``) and render offline (``gpu-operator render``). On the local
cluster with simulated GPU nodes the sample ClusterPolicy, which names no operand image, runs our
agents to ``ready``. The sample NVIDIADriver names NVIDIA's driver image (nvcr.io/nvidia/driver,
595.91.07): it stays ``disabled`` until the policy sets ``driver.useNvidiaDriverCRD``, then its
DaemonSet runs NVIDIA's driver contract (the simulator's stand-in) and both resources reach ``ready``
with the GPUs still advertised by our device plugin.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.crd import crds
from gpu_operator.api.fieldpaths import parse_facts, spec_fields
from gpu_operator.api.nvidiadriver import OWNER_LABEL, NVIDIADriver
from gpu_operator.api.validation import validate_file
from gpu_operator.cli.render import render_command
from gpu_operator.kube.api import ClusterPolicyResource, NVIDIADriverResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.sim.control.simulator import Simulator
from tests.conftest import REPO
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, explain_pods, register_operand_agents

JSON = dict[str, Any]
UPSTREAM = REPO / "tests" / "data" / "upstream"
POLICY_FILE = UPSTREAM / "clusterpolicy-sample-v26.7.yaml"
DRIVER_FILE = UPSTREAM / "nvidiadriver-sample-v26.7.yaml"
NODES_FILE = REPO / "tests" / "golden" / "data" / "render" / "inputs" / "nodes.yaml"
POLICY = "gpu-cluster-policy"
DRIVER = "nvidiadriver-sample"
NVIDIA_DRIVER_IMAGE = "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
#: The sample policy's driver DaemonSet (ours) and the prefix of an NVIDIADriver pool's DaemonSet.
POLICY_DRIVER_SET = "nvidia-driver-daemonset"
CR_DRIVER_PREFIX = "nvidia-gpu-driver-"


def _load(path: Path) -> JSON:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


# --- offline: validate and render --------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "model", "name"),
    [(POLICY_FILE, ClusterPolicy, POLICY), (DRIVER_FILE, NVIDIADriver, DRIVER)],
    ids=["clusterpolicy", "nvidiadriver"],
)
def test_sample_validates_without_errors(path: Path, model: type, name: str) -> None:
    (result,) = validate_file(path)
    assert result.errors == ()
    assert result.ok
    assert result.name == name
    assert isinstance(result.model, model)


def _leaves(node: Any, path: str = "spec") -> dict[str, Any]:
    """Every scalar, empty mapping and empty list under ``node``, by dotted path (list items by index)."""
    if isinstance(node, dict) and node:
        return {k: v for key, value in node.items() for k, v in _leaves(value, f"{path}.{key}").items()}
    if isinstance(node, list) and node:
        return {k: v for i, value in enumerate(node) for k, v in _leaves(value, f"{path}[{i}]").items()}
    return {path: node}


@pytest.mark.parametrize(
    ("path", "kind", "crd"),
    [
        (POLICY_FILE, "clusterpolicy", "nvidia.com_clusterpolicies.yaml"),
        (DRIVER_FILE, "nvidiadriver", "nvidia.com_nvidiadrivers.yaml"),
    ],
    ids=["clusterpolicy", "nvidiadriver"],
)
def test_sample_fields_are_upstream_crd_fields_and_ours(path: Path, kind: str, crd: str) -> None:
    """Each field a fixture sets is in upstream's v26.7 CRD (no typo, nothing invented) and in ours."""
    facts = UPSTREAM / f"{kind}-v26.7.fields.tsv"
    theirs = parse_facts(facts.read_text(encoding="utf-8"), source=str(facts))
    ours = spec_fields(crds()[crd])
    paths = {re.sub(r"\[\d+\]", "[]", p) for p in _leaves(_load(path)["spec"])}
    assert len(paths) > 10
    assert sorted(paths - set(theirs)) == []
    assert sorted(paths - set(ours)) == []


def _render(tmp_path: Path, *docs: JSON) -> tuple[list[JSON], str, str]:
    """``gpu-operator render`` of the documents against the golden inputs' nodes (two Ubuntu 22.04 GPU nodes)."""
    source = tmp_path / "input.yaml"
    source.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    result = CliRunner().invoke(render_command, ["--policy", str(source), "--nodes", str(NODES_FILE)])
    assert result.exit_code == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d], result.stdout, result.stderr


def _routing_problems(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("problem:", "conflict:"))]


def _daemonsets(docs: list[JSON]) -> dict[str, JSON]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}


def test_sample_policy_renders_offline_with_our_agents(tmp_path: Path) -> None:
    docs, _, err = _render(tmp_path, _load(POLICY_FILE))
    sets = _daemonsets(docs)
    for name in (POLICY_DRIVER_SET, "nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset",
                 "nvidia-operator-validator", "gpu-feature-discovery", "nvidia-mig-manager"):  # fmt: skip
        assert sets[name]["metadata"]["annotations"][IMPLEMENTATION] == "agent", name
    assert not any(name.startswith(CR_DRIVER_PREFIX) for name in sets)
    assert _routing_problems(err) == []


def test_sample_driver_renders_offline_with_nvidias_image(tmp_path: Path) -> None:
    # Alone (no ClusterPolicy) and beside the sample policy handing the driver over: one pool each.
    handed_over = _load(POLICY_FILE)
    handed_over["spec"]["driver"]["useNvidiaDriverCRD"] = True
    for docs_in in ([_load(DRIVER_FILE)], [handed_over, _load(DRIVER_FILE)]):
        docs, out, err = _render(tmp_path, *docs_in)
        sets = _daemonsets(docs)
        pools = [name for name in sets if name.startswith(CR_DRIVER_PREFIX)]
        assert len(pools) == 1, sorted(sets)
        driver = sets[pools[0]]
        assert driver["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
        assert driver["spec"]["template"]["spec"]["containers"][0]["image"] == NVIDIA_DRIVER_IMAGE
        assert POLICY_DRIVER_SET not in sets
        assert f"# NVIDIADriver {DRIVER}: pools" in out
        assert _routing_problems(err) == []


# --- on the local cluster with simulated GPU nodes -----------------------------------------------


def _status(client: Client, resource: Any, name: str) -> JSON:
    obj: JSON = client.get(resource, name).to_dict()
    return dict(obj.get("status") or {})


def _state(client: Client, resource: Any, name: str) -> str | None:
    """``status.state``, once the status speaks for the object's current generation (else None)."""
    obj: JSON = client.get(resource, name).to_dict()
    status = obj.get("status") or {}
    ready: JSON = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return status.get("state") if ready.get("observedGeneration") == obj["metadata"].get("generation") else None


def _sets(client: Client, namespace: str) -> dict[str, JSON]:
    return {str(d.metadata.name): d.to_dict() for d in client.list(DaemonSet, namespace=namespace)}  # type: ignore[union-attr]


def _explain(client: Client, namespace: str) -> str:
    policy = f"{POLICY}: {_status(client, ClusterPolicyResource, POLICY).get('conditions')}"
    return f"{policy}\n{explain_pods(client, namespace)}"


def _wait(client: Client, namespace: str, check: Callable[[], bool], what: str, timeout: float) -> None:
    try:
        wait_for(check, timeout=timeout, describe=what)
    except Exception as error:
        raise AssertionError(f"{error}\n{_explain(client, namespace)}") from error


def _assert_stored(client: Client, resource: Any, name: str, path: Path) -> None:
    """The API server kept every value the sample sets (none pruned or changed by our CRD's schema); an
    empty section may come back filled with its defaults."""
    stored = _leaves(client.get(resource, name).to_dict()["spec"])
    lost = []
    for key, value in _leaves(_load(path)["spec"]).items():
        if value == {}:
            kept = key in stored or any(k.startswith(f"{key}.") for k in stored)
        else:
            kept = value is None or stored.get(key, "<absent>") == value
        if not kept:
            lost.append(f"{key}: {value!r} stored as {stored.get(key, '<absent>')!r}")
    assert lost == []


def _gpus(client: Client, node: str) -> str | None:
    return (client.get(Node, node).status.allocatable or {}).get("nvidia.com/gpu")  # type: ignore[union-attr]


@pytest.mark.timeout(300)
def test_upstream_samples_reach_ready_on_simulated_nodes(
    client: Client,
    namespace: str,
    operator: OperatorThread,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    register_operand_agents(sim_program)
    nodes = sim_nodes("dgx-h100:1,pcie-l4:1")

    # The sample policy as it is: stored with every field it sets, our agents for every operand, ready.
    client.create(codecs.from_dict(_load(POLICY_FILE)))
    _assert_stored(client, ClusterPolicyResource, POLICY, POLICY_FILE)
    _wait(client, namespace, lambda: _state(client, ClusterPolicyResource, POLICY) == "ready", "sample ready", 90)
    sets = _sets(client, namespace)
    assert sets[POLICY_DRIVER_SET]["metadata"]["annotations"][IMPLEMENTATION] == "agent"
    assert not any(name.startswith(CR_DRIVER_PREFIX) for name in sets)
    for node in nodes:
        assert _gpus(client, node), node

    # The sample NVIDIADriver while the policy keeps the driver: reported disabled, nothing deployed.
    client.create(codecs.from_dict(_load(DRIVER_FILE)))
    _assert_stored(client, NVIDIADriverResource, DRIVER, DRIVER_FILE)
    _wait(client, namespace, lambda: _state(client, NVIDIADriverResource, DRIVER) == "disabled", "disabled", 30)
    assert not any(name.startswith(CR_DRIVER_PREFIX) for name in _sets(client, namespace))

    # Handed over: the NVIDIADriver's pool runs NVIDIA's driver image; the policy's own driver goes.
    handover = {"spec": {"driver": {"useNvidiaDriverCRD": True}}}
    client.patch(ClusterPolicyResource, POLICY, handover, patch_type=PatchType.MERGE)

    def handed_over() -> bool:
        names = set(_sets(client, namespace))
        return (
            POLICY_DRIVER_SET not in names
            and any(name.startswith(CR_DRIVER_PREFIX) for name in names)
            and _state(client, NVIDIADriverResource, DRIVER) == "ready"
            and _state(client, ClusterPolicyResource, POLICY) == "ready"
        )

    _wait(client, namespace, handed_over, "NVIDIADriver and ClusterPolicy ready", 90)
    sets = _sets(client, namespace)
    (pool,) = [ds for name, ds in sets.items() if name.startswith(CR_DRIVER_PREFIX)]
    assert pool["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    assert pool["spec"]["template"]["spec"]["containers"][0]["image"] == NVIDIA_DRIVER_IMAGE
    assert pool["status"]["desiredNumberScheduled"] == len(nodes)
    assert pool["status"]["numberReady"] == len(nodes)
    assert [ref["name"] for ref in pool["metadata"]["ownerReferences"]] == [DRIVER]
    for name in ("nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset", "nvidia-operator-validator"):
        assert sets[name]["metadata"]["annotations"][IMPLEMENTATION] == "agent", name
    ready = next(c for c in _status(client, NVIDIADriverResource, DRIVER)["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    for node in nodes:
        assert (client.get(Node, node).metadata.labels or {}).get(OWNER_LABEL) == DRIVER  # type: ignore[union-attr]
        assert _gpus(client, node), node

    # The stand-in loaded the sample's driver version on every node's simulated GPUs.
    def loaded() -> bool:
        return {simulator.node(n).gpu.driver_version() for n in nodes} == {"595.91.07"}

    wait_for(loaded, timeout=30, describe="driver 595.91.07 loaded")
