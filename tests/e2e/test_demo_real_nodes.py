"""`gpu-operator demo --real-nodes --no-interactive`: the story on two real nodes with the fake driver.

It builds (or reuses) the image and the fake driver image, starts a control plane and two real nodes
with fake GPUs, installs the chart with the fake driver image as its driver, and runs every step: the
policy ready, a GPU pod whose nvidia-smi lists its two GPUs, the exporter's metrics at its pod
address, an XID and its recovery, a MIG switch, a rolling driver upgrade. Then everything it started
is gone and the host is as it was.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from gpu_operator.cli.main import cli
from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.nodes.binaries import ENV_NODE_BIN_DIR, NodeBinaries
from tests.e2e.conftest import HostSnapshot, ProductImage, assert_host_restored


@pytest.mark.timeout(900)
def test_the_real_node_demo_runs_every_step(
    kube_binaries: KubeBinaries,
    node_binaries: NodeBinaries,
    product_image: ProductImage,
    host_snapshot: HostSnapshot,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPU_OPERATOR_KUBE_BIN_DIR", str(kube_binaries.bin_dir))
    monkeypatch.setenv(ENV_NODE_BIN_DIR, str(node_binaries.bin_dir))
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(cli, ["demo", "--real-nodes", "--no-interactive"], env=dict(os.environ))
    out = result.output
    assert result.exit_code == 0, out[-4000:] + repr(result.exception)
    for step in range(1, 9):
        assert f"[{step}/8]" in out
    assert "ClusterPolicy ready" in out
    assert out.count("$ nvidia-smi -L → GPU ") == 2  # exactly the pod's two GPUs
    assert "DCGM_FI_DEV_GPU_UTIL{" in out
    assert "XID 79 on GPU-" in out
    assert "it answers again: allocatable 2" in out
    assert "allocatable: " in out
    assert "nvidia.com/mig-1g.5gb=14" in out
    assert "ready again after" in out  # the operands the MIG switch restarted are back
    assert "real-node-1: a workload (Deployment workload-real-node-1, 1 nvidia.com/gpu) runs on driver 580.95.05" in out
    assert "real-node-2: validation-required" in out  # a state the controller moved it through
    assert "real-node-2: its workload is back, on driver 595.91.07" in out
    assert "every GPU node is upgrade-done on 595.91.07" in out
    assert "the host is as it was" in out
    assert_host_restored(host_snapshot)
