"""Lifecycle of the local control plane: ``gpu-operator cluster up --detach / status / kubeconfig / down``,
components that never outlive their supervisor (even one killed with SIGKILL), start errors that quote the
failing component's log, and fake nodes that keep heart-beating.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from lightkube import Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from gpu_operator.cli.cluster import cluster_group
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.fakenode import NODE_LEASE_NAMESPACE, FakeNode
from gpu_operator.localcluster.layout import Ports
from gpu_operator.localcluster.process import ProcessStartError
from gpu_operator.localcluster.state import ClusterState, process_alive, read_state, reap
from gpu_operator.localcluster.waiting import wait_for


def _up(state_dir: Path, local_cluster: LocalCluster) -> ClusterState:
    env = {"GPU_OPERATOR_KUBE_BIN_DIR": str(local_cluster.binaries.bin_dir)}
    result = CliRunner(env=env).invoke(cluster_group, ["up", "--detach", "--state-dir", str(state_dir)])
    assert result.exit_code == 0, result.output
    state = read_state(state_dir=state_dir)
    assert state is not None
    assert state.phase == "ready"
    assert set(state.components) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
    return state


def _component_pids(state: ClusterState) -> list[int]:
    return [c.pid for c in state.components.values() if c.pid is not None]


def test_detached_cluster_up_status_kubeconfig_down(tmp_path: Path, local_cluster: LocalCluster) -> None:
    # local_cluster only supplies the bin dir; this test runs a second, independent cluster.
    state = _up(tmp_path, local_cluster)
    runner = CliRunner()
    try:
        status = runner.invoke(cluster_group, ["status", "--state-dir", str(tmp_path)])
        assert status.exit_code == 0, status.output
        assert "ready" in status.output

        path = runner.invoke(cluster_group, ["kubeconfig", "--state-dir", str(tmp_path)])
        assert path.exit_code == 0
        assert Path(path.output.strip()) == Path(state.kubeconfig or "")
        kubectl = [str(local_cluster.binaries.kubectl), "--kubeconfig", str(state.kubeconfig)]
        listing = subprocess.run(
            [*kubectl, "get", "namespaces", "-o", "name"], capture_output=True, text=True, check=True
        )
        assert "namespace/default" in listing.stdout

        again = runner.invoke(cluster_group, ["up", "--detach", "--state-dir", str(tmp_path)])
        assert again.exit_code != 0
        assert "already running" in again.output
    finally:
        down = runner.invoke(cluster_group, ["down", "--state-dir", str(tmp_path)])
    assert down.exit_code == 0, down.output
    assert "Cluster stopped" in down.output
    assert not any(process_alive(pid) for pid in [state.pid, *_component_pids(state)])
    assert read_state(state_dir=tmp_path) is None
    gone = runner.invoke(cluster_group, ["status", "--state-dir", str(tmp_path)])
    assert gone.exit_code == 1


def test_components_die_with_a_killed_supervisor(tmp_path: Path, local_cluster: LocalCluster) -> None:
    state = _up(tmp_path, local_cluster)
    pids = _component_pids(state)
    assert len(pids) == 4
    assert all(process_alive(pid) for pid in pids)

    os.kill(state.pid, signal.SIGKILL)  # no cleanup code runs: only PR_SET_PDEATHSIG can stop the children

    def all_gone() -> bool:
        reap(state.pid)
        return not process_alive(state.pid) and not any(process_alive(pid) for pid in pids)

    wait_for(all_gone, timeout=20, describe="the components to die with their supervisor")
    status = CliRunner().invoke(cluster_group, ["status", "--state-dir", str(tmp_path)])
    assert status.exit_code == 1
    assert "stale" in status.output


def test_start_error_names_the_log_and_quotes_it(local_cluster: LocalCluster) -> None:
    broken = LocalCluster(binaries=local_cluster.binaries, extra_args={"kube-apiserver": ["--no-such-flag"]})
    with pytest.raises(ProcessStartError) as failure:
        broken.start()
    message = str(failure.value)
    assert message.startswith("kube-apiserver exited with status 1; log: ")
    log = Path(message.split("log: ", 1)[1].splitlines()[0])
    assert log.name == "kube-apiserver.log"
    assert log.is_file()  # kept after a failed start, so the error stays useful
    assert "unknown flag: --no-such-flag" in message
    assert not broken.processes  # etcd, already started, was stopped again
    shutil.rmtree(log.parent.parent)


def test_fake_node_heartbeat_renews_lease_and_ready_condition(local_cluster: LocalCluster, client: Client) -> None:
    with FakeNode(client_factory=local_cluster.client, name="heartbeat-probe", heartbeat_interval=0.5) as node:
        first_lease = client.get(Lease, node.name, namespace=NODE_LEASE_NAMESPACE)
        assert first_lease.spec is not None
        assert first_lease.spec.holderIdentity == node.name

        def renewed() -> bool:
            lease = client.get(Lease, node.name, namespace=NODE_LEASE_NAMESPACE)
            return bool(lease.spec and first_lease.spec and lease.spec.renewTime != first_lease.spec.renewTime)

        wait_for(renewed, timeout=10, describe="the lease renewTime to advance")
        wait_for(lambda: node.heartbeats >= 3, timeout=10, describe="three heartbeats")
        status = client.get(Node, node.name).status
        assert status is not None
        ready = [c for c in status.conditions or [] if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]
        assert status.allocatable is not None
        assert status.allocatable["pods"] == "110"
        assert node.last_error is None
    assert not [n for n in client.list(Node) if n.metadata and n.metadata.name == "heartbeat-probe"]


def test_start_retries_with_new_ports_when_one_is_taken(
    local_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = local_cluster.ports.apiserver  # certainly in use: the session cluster's API server
    real_allocate = Ports.allocate
    calls: list[Ports] = []

    def allocate() -> Ports:
        ports = real_allocate()
        if not calls:
            ports = dataclasses.replace(ports, apiserver=taken)
        calls.append(ports)
        return ports

    monkeypatch.setattr(Ports, "allocate", staticmethod(allocate))
    with LocalCluster(binaries=local_cluster.binaries, wait_for_default_service_account=False) as second:
        assert second.readyz()
        assert second.ports.apiserver != taken
    assert len(calls) == 2
