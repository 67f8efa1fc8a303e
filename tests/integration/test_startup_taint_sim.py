"""The startup taint on the real control plane with simulated GPU nodes (issue 21, autoscaler-aware readiness).

New nodes carry ``startup-taint.cluster-autoscaler.kubernetes.io/nvidia-gpu:NoSchedule`` (a node group adds
it at registration; here the test adds it before any policy exists). With ``startupTaint.enabled`` the real
scheduler places every operand on them (they tolerate it), the driver takes a few seconds to load, and the
operator lifts the taint from each GPU node only once its validator pod is Ready: a poll every 50 ms never
sees a node without the taint while its validator is not Ready. Other taints stay, the CPU-only node keeps
its startup taint (nothing validates it), and each lift is an Event on the node.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.keys import STARTUP_TAINT
from gpu_operator.names.objects import is_ready
from gpu_operator.reconcile.startuptaint import EVENT_REASON
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, register_operand_agents

JSON = dict[str, Any]
HELD = {"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"}
KEPT = {"key": "example.com/team", "value": "ml", "effect": "PreferNoSchedule"}
VALIDATOR: dict[str, Any] = {"app": "nvidia-operator-validator"}


def _taint_keys(client: Client, node: str) -> list[str]:
    taints = client.get(Node, node).to_dict().get("spec", {}).get("taints") or []
    return [t["key"] for t in taints]


def _lifted(client: Client, node: str) -> bool:
    return STARTUP_TAINT not in _taint_keys(client, node)


class Watcher:
    """Every 50 ms: the nodes (first), then the validator pods; a node found without the startup taint whose
    validator is not Ready even afterwards was lifted too early."""

    def __init__(self, client: Client, *, nodes: list[str], namespace: str) -> None:
        self.client, self.nodes, self.namespace = client, nodes, namespace
        self.early: list[str] = []
        self.held_unvalidated: set[str] = set()  # nodes seen held while their validator was not Ready
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            lifted = {n for n in self.nodes if STARTUP_TAINT not in _taint_keys(self.client, n)}
            pods = [p.to_dict() for p in self.client.list(Pod, namespace=self.namespace, labels=VALIDATOR)]
            ready = {p["spec"].get("nodeName") for p in pods if is_ready(p)}
            self.early += sorted(lifted - ready)
            self.held_unvalidated |= set(self.nodes) - lifted - ready


@pytest.mark.timeout(360)
def test_gpu_nodes_are_untainted_only_after_their_validator_passes(
    client: Client,
    namespace: str,
    operator: OperatorThread,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    register_operand_agents(sim_program)
    dgx, l4, cpu = sim_nodes("dgx-h100:1,pcie-l4:1,cpu-only:1")
    for node, taints in ((dgx, [HELD, KEPT]), (l4, [HELD]), (cpu, [HELD])):
        client.patch(Node, node, {"spec": {"taints": taints}}, patch_type=PatchType.MERGE)
    watcher = Watcher(client, nodes=[dgx, l4], namespace=namespace)
    watcher.thread.start()
    try:
        driver = {"env": [{"name": "SIMULATED_MODULE_LOAD_SECONDS", "value": "1"}]}
        wanted = {"dcgm": {"enabled": False}, "psa": {"enabled": True}, "driver": driver,
                  "startupTaint": {"enabled": True}}  # fmt: skip
        client.create(codecs.from_dict({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                        "metadata": {"name": "cluster-policy"}, "spec": wanted}))  # fmt: skip
        for node in (dgx, l4):
            wait_for(
                functools.partial(_lifted, client, node), timeout=240, describe=f"startup taint lifted from {node}"
            )
    finally:
        watcher.stop.set()
        watcher.thread.join()
    assert watcher.early == [], f"lifted before the validator was Ready: {watcher.early}"
    assert watcher.held_unvalidated == {dgx, l4}  # the poll did see each node held while it validated
    assert _taint_keys(client, dgx) == [KEPT["key"]]  # only the startup taint went
    assert _taint_keys(client, cpu) == [STARTUP_TAINT]  # nothing validates a node without a GPU
    events = [e.to_dict() for e in client.list(Event, namespace="default", fields={"reason": EVENT_REASON})]
    assert sorted(e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"] in (dgx, l4)) == sorted(
        [dgx, l4]
    )
