"""`gpu-operator demo --no-interactive` runs every step to completion on its own cluster.

The demo starts its own control plane and simulated nodes and installs the operator with the Helm chart
(its pod runs on a simulated node); the assertions read what it printed after each step: the policy ready
with every link of every GPU node ready, the workload's two GPUs, the exporter's utilisation line for a
busy GPU carrying the pod's label, the rolling driver upgrade's preview and progress, the MIG switch,
teardown. Right after the upgrade step, while the cluster is still up, the test reads the Nodes and the
driver pods itself: every GPU node upgrade-done and schedulable, every driver pod on the new version.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.cli.main import cli
from gpu_operator.demo import simulated as demo
from gpu_operator.demo import upgrade as demo_upgrade
from gpu_operator.names.images import driver_version
from gpu_operator.upgrade import model as m

UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


JSON = dict[str, Any]
GPU_NODES = ("demo-a100-mig-0", "demo-dgx-h100-0", "demo-dgx-h100-1", "demo-pcie-l4-0")


def _driver_version(pod: JSON) -> str:
    # The demo names NVIDIA's driver image: its pods run NVIDIA's contract, version in the image tag.
    return driver_version(pod)


@pytest.mark.timeout(400)
def test_demo_runs_to_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    after_upgrade: dict[str, list[JSON]] = {}
    real_upgrade = demo_upgrade.run_upgrade  # what demo.py calls, under its own name there

    def upgrade_then_read(**kwargs: Any) -> list[demo_upgrade.UpgradeRow]:
        rows = real_upgrade(**kwargs)
        client: Client = kwargs["client"]
        after_upgrade["nodes"] = [n.to_dict() for n in client.list(Node)]
        pods = client.list(Pod, namespace="gpu-operator", labels={"app.kubernetes.io/component": "nvidia-driver"})
        after_upgrade["pods"] = [p.to_dict() for p in pods]
        return rows

    monkeypatch.setattr(demo, "run_upgrade", upgrade_then_read)
    result = CliRunner().invoke(cli, ["demo", "--no-interactive"])
    out = result.output
    assert result.exit_code == 0, out
    positions = [out.index(f"[{step}/9]") for step in range(1, 10)]
    assert positions == sorted(positions)  # workload, exporter, driver upgrade, MIG switch, in that order
    # 1: control plane, CRDs, namespace.
    assert "established clusterpolicies.nvidia.com" in out
    assert "namespace gpu-operator (pod-security.kubernetes.io/enforce=privileged)" in out
    # 2, 3: the nodes, and the operator installed by Helm, running as a pod on one of them.
    nodes = ("demo-dgx-h100-0", "demo-dgx-h100-1", "demo-a100-mig-0", "demo-pcie-l4-0", "demo-cpu-only-0")
    for node in nodes:
        assert node in out, node
    assert "helm install gpu-operator deploy/helm/gpu-operator -n gpu-operator" in out
    running = re.search(r"operator pod gpu-operator/(gpu-operator-[a-z0-9-]+) is Running and Ready on simulated node "
                        r"(\S+), as service account gpu-operator", out)  # fmt: skip
    assert running is not None, out
    assert running.group(2).rstrip(",") in nodes
    assert "runs in-process" not in out
    # 4: the policy is ready and the final table shows every link of every GPU node ready.
    assert "ClusterPolicy state: ready" in out
    assert "ClusterPolicy cluster-policy is ready" in out
    # The readiness table's rows (the upgrade step's tables have rows starting "│ demo-" too).
    rows = [line for line in out.splitlines() if re.match(r"^│ demo-\S+ +│ [a-z0-9-]+ \(\d+ GPUs?\)", line)]
    assert len(rows) == 5, rows
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        expected = "n/a" if "cpu-only" in cells[0] else "ready"
        assert cells[2:8] == [expected] * 6, row
    # 5: the workload got two distinct H100 GPUs.
    granted = re.findall(rf"got GPU \d: ({UUID})", out)
    assert len(set(granted)) == 2, out
    # 6: the exporter shows them busy, attributed to the pod.
    busy = [line for line in out.splitlines() if "DCGM_FI_DEV_GPU_UTIL{" in line and 'pod="cuda-vectoradd"' in line]
    assert {u for u in granted if any(u in line for line in busy)} == set(granted), busy
    assert all(float(line.rsplit(" ", 1)[1]) > 0 for line in busy), busy
    # 7: the MIG switch reaches success and the new resources are allocatable.
    assert "nvidia.com/mig.config.state=pending" in out
    assert re.search(r"allocatable: .*nvidia\.com/mig-1g\.5gb=\d+", out), out
    # 7 (before the MIG switch, checked here with the rest of the cluster reads): the rolling upgrade.
    old, new = demo_upgrade.FIRST_VERSION, demo_upgrade.NEW_VERSION
    assert "Driver upgrade preview: 4 of 4 node(s) in 2 wave(s) (maxParallelUpgrades=2" in out
    assert f"{old} -> {new}" in out
    assert re.search(r"demo-\S+: (cordon|wait-for-jobs|pod-deletion|pod-restart|validation)-required", out), out
    assert f"every GPU node is upgrade-done on {new} and schedulable" in out
    assert "pod default/cuda-vectoradd was deleted before the driver under it was replaced" in out
    nodes_after = {n["metadata"]["name"]: n for n in after_upgrade["nodes"]}
    for name in GPU_NODES:
        obj = nodes_after[name]
        assert obj["metadata"]["labels"].get(m.STATE_LABEL) == m.DONE, name
        assert not obj["spec"].get("unschedulable"), name  # uncordoned
        assert m.INITIAL_UNSCHEDULABLE not in (obj["metadata"].get("annotations") or {}), name
    live = [p for p in after_upgrade["pods"] if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["spec"]["nodeName"] for p in live) == sorted(GPU_NODES)
    assert {_driver_version(p) for p in live} == {new}
    # 9: where to look, then everything is torn down.
    assert "export KUBECONFIG=" in out
    assert "kubectl get nodes" in out
    assert "demo finished" in out
