"""The Network Operator's rendered objects equal the committed golden files.

Inputs (``tests/golden/data/network/inputs``): upstream's full NicClusterPolicy example with images
through ``global``, five nodes (two OFED pools, a NIC node whose taint is not tolerated, a control
plane), one NicNodePolicy and the three network kinds. One golden file per state of the
NicClusterPolicy, one for the NicNodePolicy's states, one for the NetworkAttachmentDefinitions.
Regenerate after an intended change with
``GPU_OPERATOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/test_network_render.py``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from gpu_operator.api.network import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork, NicClusterPolicy, NicNodePolicy
from gpu_operator.names import network as net
from gpu_operator.render.network import (
    NetState,
    NicFacts,
    nic_node,
    render_cluster_policy,
    render_network,
    render_node_policy,
)
from tests.conftest import REPO

DATA = REPO / "tests" / "golden" / "data" / "network"
INPUTS = DATA / "inputs"
NAMESPACE = "nvidia-network-operator"
NETWORK_MODELS: dict[str, type[MacvlanNetwork | HostDeviceNetwork | IPoIBNetwork]] = {
    net.MACVLAN_KIND: MacvlanNetwork,
    net.HOSTDEVICE_KIND: HostDeviceNetwork,
    net.IPOIB_KIND: IPoIBNetwork,
}


def _load(name: str) -> Any:
    return yaml.safe_load((INPUTS / name).read_text(encoding="utf-8"))


def facts() -> NicFacts:
    return NicFacts(namespace=NAMESPACE, nodes=tuple(nic_node(n) for n in _load("nodes.yaml")))


def cluster_states() -> tuple[NetState, ...]:
    return render_cluster_policy(NicClusterPolicy.model_validate(_load("nicclusterpolicy.yaml")), facts())


def node_policy_states() -> tuple[NetState, ...]:
    return render_node_policy(NicNodePolicy.model_validate(_load("nicnodepolicy.yaml")), facts())


def networks() -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((INPUTS / "networks.yaml").read_text(encoding="utf-8"))
    return [render_network(NETWORK_MODELS[d["kind"]].model_validate(d)) for d in docs if d]


def text_of(states: Sequence[NetState]) -> str:
    parts = []
    for state in states:
        head = f"# {state.name}: {'enabled' if state.enabled else 'disabled'}"
        head += "".join(f"\n# {label}: {', '.join(v)}" for label, v in
                        (("daemonsets", state.daemonsets), ("deployments", state.deployments)) if v)  # fmt: skip
        head += f"\n# error: {state.error}" if state.error else ""
        head += "".join(f"\n# note: {n}" for n in state.notes)
        body = "".join(f"---\n{yaml.safe_dump(o, sort_keys=False)}" for o in state.objects)
        parts.append(f"{head}\n{body}")
    return "".join(parts)


def check_golden(name: str, text: str) -> None:
    golden = DATA / name
    if os.environ.get("GPU_OPERATOR_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing: run with GPU_OPERATOR_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8"), f"{golden.name} drifted: review, then regenerate"


@pytest.mark.parametrize("state", net.STATES)
def test_cluster_policy_state_matches_golden(state: str) -> None:
    rendered = next(s for s in cluster_states() if s.name == state)
    check_golden(f"{state}.yaml", text_of([rendered]))


def test_node_policy_matches_golden() -> None:
    check_golden("nicnodepolicy-rack-b.yaml", text_of(node_policy_states()))


def test_networks_match_golden() -> None:
    text = "".join(f"---\n{yaml.safe_dump(n, sort_keys=False)}" for n in networks())
    check_golden("networks.yaml", text)


def test_golden_scenario_has_two_pools_and_leaves_the_untolerated_node_out() -> None:
    ofed = next(s for s in cluster_states() if s.name == net.STATE_OFED)
    assert len(ofed.daemonsets) == 2
    selected = [o["spec"]["template"]["spec"]["nodeSelector"] for o in ofed.objects if o["kind"] == "DaemonSet"]
    kernels = {s["feature.node.kubernetes.io/kernel-version.full"] for s in selected}
    assert kernels == {"5.15.0-91-generic", "5.14.0-427.13.1.el9_4.x86_64"}


def test_every_golden_object_is_labelled_and_has_no_owner_or_hash() -> None:
    for state in (*cluster_states(), *node_policy_states()):
        for obj in state.objects:
            meta = obj["metadata"]
            assert meta["labels"][net.STATE_LABEL] == state.name
            assert "ownerReferences" not in meta
            assert net.REVISION_ANNOTATION not in (meta.get("annotations") or {})
