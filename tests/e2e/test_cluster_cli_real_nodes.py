"""`gpu-operator cluster up --real-nodes N` from the command line: status lists each real node's
processes, the nodes are Ready, and `cluster down` leaves the host as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.nodes.binaries import ENV_NODE_BIN_DIR, NodeBinaries
from tests.conftest import REPO
from tests.e2e.conftest import HostSnapshot, assert_host_restored

pytestmark = pytest.mark.e2e


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).parent / "gpu-operator"), *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.timeout(300)
def test_cluster_up_with_real_nodes_then_down(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, host_snapshot: HostSnapshot, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "GPU_OPERATOR_KUBE_BIN_DIR": str(kube_binaries.bin_dir),
        ENV_NODE_BIN_DIR: str(node_binaries.bin_dir),
        "COLUMNS": "200",
    }
    state = str(tmp_path / "state")
    up = _cli("cluster", "up", "--state-dir", state, "--real-nodes", "2", "--detach", env=env)
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        status = _cli("cluster", "status", "--state-dir", state, env=env)
        assert status.returncode == 0, status.stdout
        for node in ("real-node-1", "real-node-2"):
            for role in ("namespace", "containerd", "kubelet"):
                assert f"{node}/{role}" in status.stdout
        kubeconfig = _cli("cluster", "kubeconfig", "--state-dir", state, env=env).stdout.strip()
        nodes = subprocess.run(
            [str(kube_binaries.kubectl), "--kubeconfig", kubeconfig, "get", "nodes", "--no-headers"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        ready = sorted(line.split()[0] for line in nodes.stdout.splitlines() if line.split()[1] == "Ready")
        assert ready == ["real-node-1", "real-node-2"]
    finally:
        down = _cli("cluster", "down", "--state-dir", state, env=env)
    assert down.returncode == 0, down.stderr
    assert_host_restored(host_snapshot)
