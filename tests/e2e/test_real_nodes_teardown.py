"""Real nodes leave the host as they found it: after a clean stop, and after a SIGKILL of the whole tree.

A child process starts a cluster with a real node and a running pod, then the test kills the child's
process tree with SIGKILL: the kubelet, containerd and the namespace holder die with it (their parent
death signal), but the runc shims and the containers double-forked away and are still running; that is
checked first, so the test proves a real leftover is removed. The next start finds the dead run's
ledger and removes everything it lists (processes, cgroups, bridges, iptables chains, sysctls, mount
points, its data directory) before it starts; its own clean stop then restores the host exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Pod

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes import cgroups
from gpu_operator.localcluster.nodes.binaries import ENV_NODE_BIN_DIR, NodeBinaries
from gpu_operator.localcluster.nodes.host import LEDGER, Ledger, process_start
from gpu_operator.localcluster.nodes.images import PAUSE_IMAGE
from gpu_operator.localcluster.waiting import wait_for
from tests.conftest import REPO
from tests.e2e.conftest import HostSnapshot, assert_host_restored

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from gpu_operator.localcluster.cluster import LocalCluster
    from tests.e2e.test_real_nodes_teardown import run_sleeper
    cluster = LocalCluster(real_nodes=1, handle_sigterm=False)
    cluster.start()
    client = cluster.client()
    pod = run_sleeper(client)
    print(json.dumps({"data_dir": str(cluster.data_dir), "pod_ip": pod["status"]["podIP"]}), flush=True)
    time.sleep(3600)
    """
)


def run_sleeper(client: Client, *, name: str = "sleeper", node: str = "real-node-1") -> dict[str, Any]:
    """A pod running the pause image on ``node``, once it is Running."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "sleep", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
        },
    }
    client.create(codecs.from_dict(body))

    def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = client.get(Pod, name, namespace="default").to_dict()
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return wait_for(running, timeout=60, describe=f"pod {name} Running")


def _identities(pids: set[int]) -> dict[int, str]:
    """pid -> start time: PIDs are reused (they wrap at pid_max), so a pid alone names no process."""
    return {pid: start for pid in pids if (start := process_start(pid))}


def _still_running(identities: dict[int, str]) -> list[int]:
    """The processes that still run: killed ones whose new parent (init) has not reaped them yet are
    zombies, which hold nothing but their pid."""
    return [pid for pid, start in identities.items() if process_start(pid) == start and not _zombie(pid)]


def _zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # gone meanwhile
    return state in ("Z", "X")


@pytest.mark.timeout(300)
def test_a_start_after_sigkill_removes_what_the_dead_run_left(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, host_snapshot: HostSnapshot
) -> None:
    env = {
        **os.environ,
        "GPU_OPERATOR_KUBE_BIN_DIR": str(kube_binaries.bin_dir),
        ENV_NODE_BIN_DIR: str(node_binaries.bin_dir),
        "PYTHONPATH": str(REPO),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, f"the child exited with {child.wait()} before its pod ran"
        started = json.loads(line)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()

    # What the dead run left: its ledger, and processes (shims, containers) in its cgroups.
    dead = Ledger.load()
    assert dead is not None
    assert dead.owner_pid == child.pid
    leftover_pids = wait_for(lambda: cgroups.pids(dead.run_cgroup) or None, timeout=5, describe="leftover processes")
    leftovers = _identities(leftover_pids)
    shims = [p for p in leftovers if b"containerd-shim" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert shims, "the shims should have outlived the killed run (else this test proves nothing)"
    assert Path(started["data_dir"]).is_dir()

    # A new start cleans up first, then runs a pod of its own; its clean stop restores the host.
    with LocalCluster(binaries=kube_binaries, real_nodes=1, node_binaries=node_binaries) as cluster:
        assert cluster.real_nodes is not None
        assert cluster.real_nodes.host.recovered == dead
        assert not cgroups.exists(dead.run_cgroup)
        assert not _still_running(leftovers)
        assert not Path(started["data_dir"]).exists()
        client = cluster.client()
        try:
            run_sleeper(client, name="after-recovery")
        finally:
            client.close()
        assert LEDGER.exists()
    assert_host_restored(host_snapshot)
    assert not _still_running(leftovers)
