"""``secondaryNetwork.multus`` naming this operator's image renders our multus agent; the golden file says how.

``gpu-operator agent multus`` as root (privileged, host network) with the host's CNI confs, binaries
and state, the kubelet's PodResources and the device-info files under ``/host``, and a ClusterRole of
what it does. Upstream's image keeps upstream's rendering (``test_network_render``'s golden).
Regenerate after an intended change with
``GPU_OPERATOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/test_network_multus_agent.py``.
"""

from __future__ import annotations

from typing import Any

from gpu_operator.api.network import NicClusterPolicy
from gpu_operator.names import network as net
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE
from gpu_operator.render.network import NetState, render_cluster_policy
from tests.golden.test_network_render import check_golden, facts, text_of

REPOSITORY = DEFAULT_AGENT_IMAGE.rsplit("/", 1)[0]


def _multus(multus: dict[str, Any]) -> NetState:
    policy = {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": net.NCP_NAME},
              "spec": {"secondaryNetwork": {"multus": multus}}}  # fmt: skip
    states = render_cluster_policy(NicClusterPolicy.model_validate(policy), facts())
    return next(s for s in states if s.name == net.STATE_MULTUS)


def test_multus_agent_matches_golden() -> None:
    state = _multus({"image": "gpu-operator", "repository": REPOSITORY, "version": "v9"})
    check_golden(f"agents/{net.STATE_MULTUS}.yaml", text_of([state]))
    (ds,) = [o for o in state.objects if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    assert main["command"] == ["gpu-operator", "agent", "multus"]
    assert main["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert pod["hostNetwork"] is True
    mounts = {m["mountPath"] for m in main["volumeMounts"]}
    assert {
        "/host/etc/cni/net.d",
        "/host/opt/cni/bin",
        "/host/var/lib/cni",
        "/host/var/lib/kubelet/pod-resources",
    } <= mounts
    (role,) = [o for o in state.objects if o["kind"] == "ClusterRole"]
    assert {(r["resources"][0], tuple(r["verbs"])) for r in role["rules"]} == {
        ("pods", ("get", "patch")), ("network-attachment-definitions", ("get", "list")),
        ("ippools", ("get", "list", "watch")),  # nv-ipam delegates: the node's block of each pool
    }  # fmt: skip
    assert state.notes == ()


def test_a_multus_config_is_noted_as_unused_by_our_agent() -> None:
    state = _multus({"image": "gpu-operator", "repository": REPOSITORY, "version": "v9", "config": "{}"})
    assert len(state.notes) == 1
    assert "does not read it" in state.notes[0]
    assert all(o["kind"] != "ConfigMap" for o in state.objects)


def test_upstreams_image_keeps_upstreams_thin_plugin() -> None:
    state = _multus({"image": "multus-cni", "repository": "ghcr.io/k8snetworkplumbingwg", "version": "v4.1.0"})
    (ds,) = [o for o in state.objects if o["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["command"] == ["/thin_entrypoint"]
