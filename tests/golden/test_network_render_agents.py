"""A NicClusterPolicy naming this operator's image renders our agents; the golden files say how.

The OFED driver (with safe load), the RDMA shared and SR-IOV device plugins (CDI on) and NIC feature
discovery run ``gpu-operator agent NAME`` from the agent image's repository, on the golden nodes of
``test_network_render``. Upstream images keep upstream's rendering: ``test_network_render``'s goldens.
Regenerate after an intended change with
``GPU_OPERATOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/test_network_render_agents.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpu_operator.api.network import NicClusterPolicy
from gpu_operator.names import network as net
from gpu_operator.render.agents import AGENTS
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE
from gpu_operator.render.network import NetState, render_cluster_policy
from gpu_operator.render.network.agentpods import HOST_ROOT
from tests.golden.test_network_render import check_golden as _check
from tests.golden.test_network_render import facts, text_of

REPOSITORY = DEFAULT_AGENT_IMAGE.rsplit("/", 1)[0]  # ghcr.io/gpu-operator-py
OURS = {"image": "gpu-operator", "repository": REPOSITORY, "version": "26.4-0"}
STATES = (net.STATE_OFED, net.STATE_RDMA_DP, net.STATE_SRIOV_DP, net.STATE_NIC_FD)
POLICY: dict[str, Any] = {
    "apiVersion": net.API_VERSION,
    "kind": net.NCP_KIND,
    "metadata": {"name": net.NCP_NAME},
    "spec": {
        "ofedDriver": {
            **OURS,
            "env": [{"name": "UNLOAD_STORAGE_MODULES", "value": "true"}],
            "upgradePolicy": {"autoUpgrade": True, "safeLoad": True},
        },
        "rdmaSharedDevicePlugin": {
            **OURS,
            "useCdi": True,
            "config": '{"configList":[{"resourceName":"rdma_shared_device_a","rdmaHcaMax":63,'
            '"selectors":{"vendors":["15b3"]}}]}',
        },
        "sriovDevicePlugin": {**OURS, "config": '{"resourceList":[]}'},
        "nicFeatureDiscovery": OURS,
    },
}


def agent_states() -> tuple[NetState, ...]:
    return render_cluster_policy(NicClusterPolicy.model_validate(POLICY), facts())


def _pods(state: NetState) -> list[dict[str, Any]]:
    return [o["spec"]["template"]["spec"] for o in state.objects if o["kind"] == "DaemonSet"]


@pytest.mark.parametrize("state", STATES)
def test_agent_state_matches_golden(state: str) -> None:
    rendered = next(s for s in agent_states() if s.name == state)
    _check(f"agents/{state}.yaml", text_of([rendered]))


def test_every_container_runs_an_agent_of_the_image() -> None:
    expected = {
        net.STATE_OFED: {"ofed-driver", "ofed-safe-load"},
        net.STATE_RDMA_DP: {"rdma-shared-dp"},
        net.STATE_SRIOV_DP: {"sriov-dp"},
        net.STATE_NIC_FD: {"nic-feature-discovery"},
    }
    for state in agent_states():
        if state.name not in expected:
            continue
        named = set()
        for pod in _pods(state):
            for c in [*pod.get("initContainers", []), *pod["containers"]]:
                assert c["command"][:2] == ["gpu-operator", "agent"], c["name"]
                assert "args" not in c
                # OFED's tag is a DOCA release (the CRD's pattern), not ours: its pods run the agent image itself.
                tag = DEFAULT_AGENT_IMAGE.rsplit(":", 1)[1] if state.name == net.STATE_OFED else "26.4-0"
                assert c["image"] == f"{REPOSITORY}/gpu-operator:{tag}"
                env = {e["name"]: e for e in c["env"]}
                assert env["HOST_ROOT"]["value"] == HOST_ROOT
                assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
                named.add(c["command"][2])
        assert named == expected[state.name]
        assert named <= AGENTS


def test_ofed_keeps_its_container_name_pools_and_startup_probe() -> None:
    ofed = next(s for s in agent_states() if s.name == net.STATE_OFED)
    assert len(ofed.daemonsets) == 2
    for pod in _pods(ofed):
        main = pod["containers"][0]
        assert main["name"] == net.OFED_CONTAINER  # the mofed.wait label follows its readiness
        assert main["startupProbe"]["exec"]["command"] == ["test", "-f", net.DRIVER_READY]
        assert {"name": "UNLOAD_STORAGE_MODULES", "value": "true"} in main["env"]
        assert {"name": "NVIDIA_NIC_DRIVER_VER", "value": "26.4-0"} in main["env"]
        assert [c["name"] for c in pod["initContainers"]] == [net.OFED_INIT_CONTAINER]


def test_without_safe_load_there_is_no_init_container() -> None:
    policy = {**POLICY, "spec": {"ofedDriver": OURS}}
    states = render_cluster_policy(NicClusterPolicy.model_validate(policy), facts())
    ofed = next(s for s in states if s.name == net.STATE_OFED)
    assert all("initContainers" not in pod for pod in _pods(ofed))


def test_another_agent_image_repository_keeps_upstreams_programs() -> None:
    other = replace(facts(), agent_image="registry.example.com/mirror/gpu-operator:v1")
    states = render_cluster_policy(NicClusterPolicy.model_validate(POLICY), other)
    for state in states:
        for pod in _pods(state):
            assert all(c.get("command", [""])[:1] != ["gpu-operator"] for c in pod["containers"])
