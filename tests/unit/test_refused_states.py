"""States whose agent the image lacks are refused: never rendered with a command that cannot start, and
named in the policy's status (issue [2/10]: ten rendered containers named agents that did not exist)."""

from __future__ import annotations

from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.observe.status import REFUSED_CONDITION, StateResult, policy_status, state_result
from gpu_operator.render import ClusterFacts, OperatorSettings, StateManifests
from gpu_operator.render.agents import AGENTS, agents_named, missing_agents
from gpu_operator.render.states import render

FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
NOW = "2026-12-01T10:00:00Z"


def _policy(spec: dict[str, object]) -> ClusterPolicy:
    body = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": spec}
    return ClusterPolicy.model_validate(body)


def _states(spec: dict[str, object]) -> dict[str, StateManifests]:
    return {s.name: s for s in render(_policy(spec), FACTS, operator=OperatorSettings())}


def test_the_agent_names_are_exactly_the_cli_programs() -> None:
    assert set(PROGRAMS) == AGENTS


def test_agents_named_reads_init_and_main_containers() -> None:
    ds = {
        "kind": "DaemonSet",
        "spec": {"template": {"spec": {
            "initContainers": [{"command": ["gpu-operator", "agent", "validator"]}],
            "containers": [{"command": ["gpu-operator", "agent", "vgpu-manager"]}, {"command": ["sh", "-c", "x"]}],
        }}},
    }  # fmt: skip
    assert agents_named([ds]) == {"validator", "vgpu-manager"}
    assert missing_agents([ds]) == ["vgpu-manager"]


def test_the_default_policy_refuses_the_states_without_an_agent_and_renders_the_rest() -> None:
    states = _states({})
    for name in ("state-dcgm",):
        assert states[name].enabled
        assert states[name].objects == ()
        assert "has no agent" in states[name].refused[0]
        assert state_result(states[name]).status == "refused"
    # The MPS control daemon is an agent of its own now: rendered, on the nodes GFD marks mps.capable.
    mps = states["state-mps-control-daemon"]
    assert not mps.refused
    assert agents_named(mps.objects) == {"mps-control-daemon", "validator"}
    for state in states.values():
        assert not missing_agents(state.objects), state.name
    assert states["state-device-plugin"].objects
    assert not states["state-device-plugin"].refused


def test_every_enabled_state_either_runs_existing_agents_or_is_refused() -> None:
    spec = {
        "sandboxWorkloads": {"enabled": True},
        "vgpuManager": {"enabled": True},
        "ccManager": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "driver": {"rdma": {"enabled": True}},
    }
    for state in _states(spec).values():
        assert agents_named(state.objects) <= AGENTS, state.name
        if state.enabled and not state.objects:
            assert state.refused or state.notes, f"{state.name} is enabled, has nothing to deploy and says nothing"


def test_a_driver_sidecar_without_agent_is_left_out_and_reported() -> None:
    driver = _states({"driver": {"rdma": {"enabled": True}}, "gds": {"enabled": True}})["state-driver"]
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    names = [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]]
    assert "nvidia-fs-ctr" not in names
    assert any("nvidia-fs" in r for r in driver.refused)
    # GPUDirect RDMA's side-car has an agent of ours (agents.drivermanager.peermem): deployed.
    assert names == ["nvidia-driver-ctr", "nvidia-peermem-ctr"]
    assert not any("nvidia-peermem" in r for r in driver.refused)


def test_refused_states_are_named_in_a_condition_and_do_not_hold_the_policy_back() -> None:
    results = [
        StateResult(
            name="state-driver", status="ready", refused=("spec.driver.rdma (nvidia-peermem-ctr) not deployed",)
        ),
        StateResult(name="state-dcgm", status="refused", reason="not deployed: no agent dcgm"),
    ]
    status = policy_status(results=results, facts=FACTS, generation=2, now=NOW)
    assert status.state == "ready"
    (refused,) = [c for c in status.conditions if c["type"] == REFUSED_CONDITION]
    assert refused["status"] == "True"
    assert refused["reason"] == "AgentNotProvided"
    assert "state-dcgm: not deployed: no agent dcgm" in str(refused["message"])
    assert "state-driver: spec.driver.rdma" in str(refused["message"])
    plain = policy_status(
        results=[StateResult(name="state-driver", status="ready")], facts=FACTS, generation=2, now=NOW
    )
    assert REFUSED_CONDITION not in {c["type"] for c in plain.conditions}
