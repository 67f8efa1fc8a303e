"""NVIDIA's own operand images, as upstream's values name them, on simulated nodes with stand-ins.

The chart renders our ClusterPolicy from an upstream v26.7-shaped values file used unchanged
(``tests/data/upstream/values-v26.7.yaml``): every operand names NVIDIA's image, so every operand
DaemonSet runs NVIDIA's contract (``render.nvidia``). NVIDIA's images cannot be pulled here; the
simulator runs stand-ins for them that honour the contract's files (``sim.programs.standins``: the
driver stand-in writes ``.driver-ctr-ready``, entrypoints wait for and source ``driver-ready``, the
wait loops wait for ``toolkit-ready``). The policy reaches ``ready`` on two GPU nodes with every
DaemonSet annotated ``nvidia``; then a mixed policy (NVIDIA's driver, our other operands) reaches
``ready`` too and the device plugin advertises the GPUs.
"""

from __future__ import annotations

import json
import subprocess
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

from gpu_operator.cli.main import cli
from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.binaries import locate_binaries
from gpu_operator.localcluster.tools import component_env
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.keys import IMPLEMENTATION
from tests.conftest import REPO
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, explain_pods, register_operand_agents

JSON = dict[str, Any]
VALUES = REPO / "tests" / "data" / "upstream" / "values-v26.7.yaml"
CHART = REPO / "deploy" / "helm" / "gpu-operator"


def _chart_policy(values: Path) -> JSON:
    """The chart's ClusterPolicy for a values file, by the real helm (``make kube-bin``)."""
    helm = locate_binaries(required=("helm",)).helm
    args = [str(helm), "template", "g", str(CHART), "-f", str(values), "--kube-version", "1.37.0"]
    docs = subprocess.run(args, env=component_env(), capture_output=True, text=True, check=True, timeout=120).stdout
    (policy,) = [d for d in yaml.safe_load_all(docs) if d and d["kind"] == "ClusterPolicy"]
    return dict(policy)


def _state(client: Client) -> str | None:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return (obj.get("status") or {}).get("state")


def _wait(client: Client, namespace: str, check: Callable[[], bool], what: str, timeout: float) -> None:
    try:
        wait_for(check, timeout=timeout, describe=what)
    except Exception as error:
        raise AssertionError(f"{error}\n{explain_pods(client, namespace)}") from error


@pytest.mark.timeout(480)
def test_upstream_values_run_nvidia_images_to_ready(
    client: Client,
    namespace: str,
    operator: OperatorThread,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    register_operand_agents(sim_program)
    dgx, l4 = sim_nodes("dgx-h100:1,pcie-l4:1")
    policy = _chart_policy(VALUES)
    client.create(codecs.from_dict(policy))
    _wait(client, namespace, lambda: _state(client) == "ready", "ClusterPolicy ready with NVIDIA's images", 300)
    sets = {d.metadata.name: d for d in client.list(DaemonSet, namespace=namespace)}  # type: ignore[union-attr]
    for name in (
        "nvidia-driver-daemonset-ubuntu22.04",
        "nvidia-container-toolkit-daemonset",
        "nvidia-operator-validator",
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
    ):
        ds = sets[name].to_dict()
        assert ds["metadata"]["annotations"][IMPLEMENTATION] == "nvidia", name
        assert not any(
            c.get("command", [])[:1] == ["gpu-operator"] for c in ds["spec"]["template"]["spec"]["containers"]
        ), name
    driver = sets["nvidia-driver-daemonset-ubuntu22.04"].to_dict()["spec"]["template"]["spec"]["containers"][0]
    assert driver["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
    for node in (dgx, l4):
        assert (client.get(Node, node).status.allocatable or {}).get("nvidia.com/gpu")  # type: ignore[union-attr]
    # `gpu-operator status` says which implementation each operand runs.
    kubeconfig = str(operator.cluster.kubeconfig_path)
    shown = CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig, "-o", "json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["implementations"]["nvidia-device-plugin-daemonset"] == "nvidia"
    text = CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig]).output
    assert "NVIDIA's images (NVIDIA's contract): " in text

    # Mixed: NVIDIA's driver container, our toolkit, validator, plugin and the rest (no image named).
    mixed = {"driver": policy["spec"]["driver"], "dcgm": {"enabled": False}}
    client.patch(ClusterPolicyResource, "cluster-policy", {"spec": None}, patch_type=_merge())
    client.patch(ClusterPolicyResource, "cluster-policy", {"spec": mixed}, patch_type=_merge())

    def mixed_ready() -> bool:
        found = {d.metadata.name: d.to_dict() for d in client.list(DaemonSet, namespace=namespace)}  # type: ignore[union-attr]
        ours = ("nvidia-container-toolkit-daemonset", "nvidia-operator-validator", "nvidia-device-plugin-daemonset")
        want = dict.fromkeys((*ours, "gpu-feature-discovery"), "agent")
        want["nvidia-driver-daemonset-ubuntu22.04"] = "nvidia"
        seen = {name: (found[name]["metadata"].get("annotations") or {}).get(IMPLEMENTATION) for name in want
                if name in found}  # fmt: skip
        return seen == want and _state(client) == "ready"

    _wait(client, namespace, mixed_ready, "mixed policy ready", 240)
    found = {d.metadata.name: d.to_dict() for d in client.list(DaemonSet, namespace=namespace)}  # type: ignore[union-attr]
    assert found["nvidia-driver-daemonset-ubuntu22.04"]["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    assert found["nvidia-device-plugin-daemonset"]["metadata"]["annotations"][IMPLEMENTATION] == "agent"


def _merge() -> PatchType:
    return PatchType.MERGE
