"""`gpu-operator demo --no-interactive` runs every step to completion on its own cluster.

The demo starts its own control plane and simulated nodes and installs the operator with the Helm chart
(its pod runs on a simulated node); the assertions read what it printed after each step: the policy ready
with every link of every GPU node ready, the workload's two GPUs, the exporter's utilisation line for a
busy GPU carrying the pod's label, the MIG switch, teardown.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gpu_operator.cli.main import cli

pytestmark = pytest.mark.integration

UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.mark.timeout(400)
def test_demo_runs_to_completion() -> None:
    result = CliRunner().invoke(cli, ["demo", "--no-interactive"])
    out = result.output
    assert result.exit_code == 0, out
    for step in range(1, 9):
        assert f"[{step}/8]" in out, step
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
    rows = [line for line in out.splitlines() if re.match(r"^│ demo-", line)]
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
    assert "rolling driver upgrades are not built yet" in out
    # 8: where to look, then everything is torn down.
    assert "export KUBECONFIG=" in out
    assert "kubectl get nodes" in out
    assert "demo finished" in out
