"""``gpu-operator sim up`` in the foreground against the session's cluster, driven by ``sim status`` and
``sim fault ...`` through its control socket; Ctrl-C removes its nodes. Node NotReady as a fault."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node

from gpu_operator.cli.sim import sim_group
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.server import read_state
from gpu_operator.sim.control.simulator import Simulator
from tests.integration.conftest_sim import SimNodesFactory

# The command group is registered in gpu_operator.cli.main by the CLI's owner; run the group itself here.
LAUNCH = "from gpu_operator.cli.sim import sim_group; sim_group(prog_name='gpu-operator sim')"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="simcli-", dir="/tmp"))  # short: unix socket paths
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ready(client: Client, name: str) -> str | None:
    try:
        conditions = client.get(Node, name).to_dict()["status"]["conditions"]
    except ApiError:
        return None
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def _invoke(state_dir: Path, *args: str) -> str:
    result = CliRunner().invoke(sim_group, [*args, "--state-dir", str(state_dir)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.timeout(90)
def test_sim_up_fault_and_ctrl_c(local_cluster: LocalCluster, client: Client, state_dir: Path) -> None:
    argv = [sys.executable, "-c", LAUNCH, "up", "--nodes", "dgx-h100:1,cpu-only:1", "--gpu-plugin", "local"]
    argv += ["--kubeconfig", str(local_cluster.kubeconfig_path), "--state-dir", str(state_dir)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        state = wait_for(lambda: read_state(state_dir=state_dir), timeout=30, describe="sim up state file")
        assert state.nodes == ["sim-dgx-h100-0", "sim-cpu-only-0"]
        wait_for(lambda: _ready(client, "sim-dgx-h100-0") == "True", timeout=15, describe="node Ready")

        assert "sim-dgx-h100-0" in _invoke(state_dir, "status")
        assert "XID 79" in _invoke(state_dir, "fault", "xid", "sim-dgx-h100-0", "--gpu", "1", "--xid", "79")
        allocatable = client.get(Node, "sim-dgx-h100-0").to_dict()["status"]["allocatable"]
        assert allocatable["nvidia.com/gpu"] == "7"
        _invoke(state_dir, "fault", "not-ready", "sim-cpu-only-0")
        wait_for(lambda: _ready(client, "sim-cpu-only-0") == "False", timeout=15, describe="node NotReady")
        _invoke(state_dir, "fault", "ready", "sim-cpu-only-0")
        wait_for(lambda: _ready(client, "sim-cpu-only-0") == "True", timeout=15, describe="node Ready again")
        _invoke(state_dir, "fault", "kubelet-restart", "sim-dgx-h100-0")

        refused = CliRunner().invoke(sim_group, ["fault", "crash", "sim-cpu-only-0", "--state-dir", str(state_dir)])
        assert refused.exit_code == 1
        assert "no running container on sim-cpu-only-0" in refused.output
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "Simulated nodes removed." in output
    assert _ready(client, "sim-dgx-h100-0") is None
    assert read_state(state_dir=state_dir) is None


def test_node_not_ready_taints_and_recovers(client: Client, simulator: Simulator, sim_nodes: SimNodesFactory) -> None:
    (node,) = sim_nodes("cpu-only:1")

    def taints() -> list[str]:
        return [t["key"] for t in client.get(Node, node).to_dict().get("spec", {}).get("taints", [])]

    wait_for(lambda: not taints(), timeout=30, describe="the new node untainted")
    simulator.set_ready(node, ready=False)
    wait_for(lambda: "node.kubernetes.io/not-ready" in taints(), timeout=30, describe="the not-ready taint")
    assert _ready(client, node) == "False"
    simulator.set_ready(node, ready=True)
    wait_for(lambda: not taints(), timeout=30, describe="the not-ready taint removed")
