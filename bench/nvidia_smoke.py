"""Smoke run of NVIDIA's operator on simulated nodes: ``python bench/nvidia_operator.py [NODES]`` (default 20).

A fresh local control plane, NODES simulated nodes on one OS (Ubuntu 22.04: NVIDIA's operator takes the
driver image's OS tag from the first GPU node it lists, so mixed OSes never settle) in a simulator process
running :func:`nvidia_standins.light_standins`, NVIDIA's operator, and the chart's ClusterPolicy: prints the
time to ``status.state=ready`` and to every DaemonSet rolled out, checks that no container waits as
``UnknownProgram``, then changes the driver version and times NVIDIA's upgrade controller to
``upgrade-done`` on every node.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nvidia_operator as nv
from lightkube import Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Pod

from gpu_operator.localcluster.binaries import locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.sim.nics import OsPool
from gpu_operator.sim.shapes import NodeRequest

ONE_OS = OsPool(os_id="ubuntu", os_version_id="22.04", kernel_version="5.15.0-119-generic")
MIX_PER_20 = {"dgx-h100": 6, "hgx-h200": 2, "dgx-a100": 2, "pcie-l4": 4, "pcie-t4": 2, "a100-mig": 2, "cpu-only": 2}
TIMEOUT = 600.0


def one_os_requests(nodes: int) -> list[NodeRequest]:
    """``nodes`` simulated nodes in the mix of :data:`MIX_PER_20`, every one on Ubuntu 22.04."""
    return [NodeRequest(profile=p, count=max(1, c * nodes // 20), os_pool=ONE_OS) for p, c in MIX_PER_20.items()]


def _sim_child(conn: Any, kubeconfig: str, requests: list[NodeRequest]) -> None:
    from gpu_operator.kube.restclient import ClusterAccess  # noqa: PLC0415 - the child's imports
    from gpu_operator.sim.control.simulator import Simulator  # noqa: PLC0415
    from gpu_operator.sim.kubelet.node import NodeOptions  # noqa: PLC0415
    from gpu_operator.sim.programs.programs import default_registry  # noqa: PLC0415

    registry = default_registry()
    for name, program in nv.light_standins().items():
        registry.register_program(name, program)
    simulator = Simulator(access=ClusterAccess.from_kubeconfig(Path(kubeconfig)), registry=registry)
    simulator.start()
    begin = time.monotonic()
    simulator.add_nodes(requests, options=NodeOptions(kubelet_grpc=False, gpu_plugin="local"))
    conn.send(time.monotonic() - begin)
    conn.recv()
    conn.send("bye")


def _waiting(client: Client) -> dict[str, int]:
    """Containers of the namespace's pods that wait, by ``container reason``, and pods not Ready."""
    out: dict[str, int] = {}
    for pod in client.list(Pod, namespace=nv.NAMESPACE):
        status = pod.to_dict().get("status") or {}
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
            if reason:
                out[f"{c['name']} {reason}"] = out.get(f"{c['name']} {reason}", 0) + 1
        if not any(x["type"] == "Ready" and x["status"] == "True" for x in status.get("conditions") or []):
            out["pods not Ready"] = out.get("pods not Ready", 0) + 1
    return out


def _wait(check: Any, timeout: float) -> float | None:
    begin = time.monotonic()
    while time.monotonic() - begin < timeout:
        if check():
            return time.monotonic() - begin
        time.sleep(0.5)
    return None


def main(nodes: int | None = None) -> None:
    nodes = nodes or (int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    binaries, binary = locate_binaries(), nv.nvidia_operator_binary()
    logs = Path(tempfile.mkdtemp(prefix="nvidia-smoke-"))
    spawn = multiprocessing.get_context("spawn")
    with LocalCluster(binaries=binaries) as cluster:
        client = cluster.client(field_manager="bench")
        nv.install_nvidia_crds(client=client)
        client.create(Namespace(metadata=ObjectMeta(name=nv.NAMESPACE)))
        sim, sim_end = spawn.Pipe()
        requests = one_os_requests(nodes)
        child = spawn.Process(target=_sim_child, args=(sim_end, str(cluster.kubeconfig_path), requests), daemon=True)
        child.start()
        print(f"nvidia smoke: {sum(r.count for r in requests)} nodes registered in {sim.recv():.1f} s")
        operator = nv.NvidiaOperatorProcess(
            kubeconfig=cluster.kubeconfig_path, binary=binary, log_path=logs / "nvidia-operator.log"
        )
        print(f"nvidia smoke: operator pid {operator.pid}, log {operator.log_path}")
        time.sleep(5)
        policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": nv.POLICY}}
        client.create(codecs.from_dict({**policy, "spec": nv.NVIDIA_POLICY_SPEC}))
        operator.phase = "policy to ready"
        begin = time.monotonic()
        ready = _wait(lambda: nv.policy_state(client) == "ready", TIMEOUT)
        print(f"nvidia smoke: policy ready after {ready} s (state {nv.policy_state(client)})")
        rolled = _wait(lambda: nv.rolled_out(client), TIMEOUT - (time.monotonic() - begin))
        print(f"nvidia smoke: every DaemonSet rolled out after {time.monotonic() - begin:.1f} s ({rolled})")
        for ds in client.list(DaemonSet, namespace=nv.NAMESPACE):
            data = ds.to_dict()
            st = data.get("status") or {}
            print(
                f"  {data['metadata']['name']}: desired {st.get('desiredNumberScheduled')}, available "
                f"{st.get('numberAvailable')}"
            )
        print(f"nvidia smoke: waiting containers {_waiting(client)}; RSS peaks {operator.peaks}")
        operator.phase = "upgrade"
        try:
            took = nv.nvidia_upgrade(client=client, version=nv.UPGRADE_DRIVER_VERSION, timeout=TIMEOUT)
            print(f"nvidia smoke: driver upgrade to {nv.UPGRADE_DRIVER_VERSION} done in {took:.1f} s")
        except TimeoutError as error:
            print(f"nvidia smoke: {error}; waiting containers {_waiting(client)}")
        print(f"nvidia smoke: RSS peaks by phase {operator.peaks}")
        operator.stop()
        sim.send("stop")
        sim.recv()
        child.join(timeout=60)
        client.close()


if __name__ == "__main__":
    main()
