"""`gpu-operator cluster up --real-nodes N` from the command line: status lists each real node's
processes, the nodes are Ready, and `cluster down` leaves the host as it was; with `--gpus`, in the
foreground, the node has the fake driver of its profile on its host (and only there), and Ctrl-C
leaves the host as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.nodes.binaries import ENV_NODE_BIN_DIR, NodeBinaries
from gpu_operator.localcluster.waiting import wait_for
from tests.conftest import REPO
from tests.e2e.conftest import HostSnapshot, ProductImage, assert_host_restored


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


@pytest.mark.timeout(300)
def test_cluster_up_with_a_fake_gpu_node_in_the_foreground(
    kube_binaries: KubeBinaries,
    node_binaries: NodeBinaries,
    product_image: ProductImage,
    host_snapshot: HostSnapshot,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "GPU_OPERATOR_KUBE_BIN_DIR": str(kube_binaries.bin_dir),
        ENV_NODE_BIN_DIR: str(node_binaries.bin_dir),
    }
    state = str(tmp_path / "state")
    argv = [str(Path(sys.executable).parent / "gpu-operator"), "cluster", "up", "--state-dir", state,
            "--real-nodes", "1", "--gpus", "pcie-l4", "--image", str(product_image.archive)]  # fmt: skip
    up = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:

        def kubeconfig() -> str | None:
            if up.poll() is not None:
                raise AssertionError(f"cluster up exited {up.returncode}: {up.stderr.read() if up.stderr else ''}")
            result = _cli("cluster", "kubeconfig", "--state-dir", state, env=env)
            if result.returncode != 0:
                return None
            get = [str(kube_binaries.kubectl), "--kubeconfig", result.stdout.strip(), "get", "nodes", "--no-headers"]
            nodes = subprocess.run(get, capture_output=True, text=True, timeout=30, check=False)
            return result.stdout.strip() if " Ready " in nodes.stdout else None

        config = wait_for(kubeconfig, timeout=180, interval=1.0, describe="the foreground cluster's Ready node")
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "look", "namespace": "default"},
            "spec": {"nodeName": "real-node-1", "restartPolicy": "Never", "containers": [{
                "name": "look", "image": product_image.reference, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "ls /node-dev | tr '\\n' ' '; echo"],
                "volumeMounts": [{"name": "dev", "mountPath": "/node-dev"}]}],
                "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]},
        }  # fmt: skip
        kubectl = [str(kube_binaries.kubectl), "--kubeconfig", config]
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(pod), text=True, check=True, timeout=30,
                       capture_output=True)  # fmt: skip

        def listed() -> set[str] | None:
            out = subprocess.run([*kubectl, "logs", "look"], capture_output=True, text=True, timeout=30, check=False)
            return set(out.stdout.split()) if "nvidiactl" in out.stdout else None

        devices = wait_for(listed, timeout=90, interval=1.0, describe="the node's /dev as its pods see it")
        assert {"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"} <= devices  # the L4 node's four
        assert "nvidia4" not in devices
        assert not Path("/dev/nvidiactl").exists()  # on that node only
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=120)
        if up.stderr:
            up.stderr.close()
    assert up.returncode == 0
    assert_host_restored(host_snapshot)
