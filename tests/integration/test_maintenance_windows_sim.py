"""Maintenance windows on the real control plane with simulated GPU nodes (issue 21), at an injected time.

The operator runs with a clock the test sets: Friday 12:00 UTC, a nightly window from 02:00 for 2 h.
A new driver version arrives outside the window: every node is marked ``upgrade-required`` and none
is cordoned or has its driver replaced while a poll watches for 5 s; the policy's upgrade status says
when the window opens. The clock moves to 02:00 (a clock raises no event: a node annotation wakes the
controller, whose own recheck is up to 5 minutes away); the rollout then runs one node at a time to
``upgrade-done`` on the new driver.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.images import driver_version
from gpu_operator.reconcile.operator import OperatorThread
from gpu_operator.upgrade import model as m
from tests.chaos.harness import NEW, OLD, node_states, policy
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, register_operand_agents

JSON = dict[str, Any]
WINDOWS = {"timeZone": "UTC", "windows": [{"schedule": "0 2 * * *", "duration": "2h"}]}
FRIDAY_NOON = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC).timestamp()
SATURDAY_2AM = dt.datetime(2026, 12, 5, 2, 0, tzinfo=dt.UTC).timestamp()


class Clock:
    """The operator's "now", set by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _drivers(client: Client, namespace: str, nodes: list[str]) -> dict[str, tuple[str, str]]:
    """node -> (driver pod uid, its driver version)."""
    pods = client.list(Pod, namespace=namespace, labels={"app.kubernetes.io/component": "nvidia-driver"})
    out = {}
    for pod in pods:
        doc = pod.to_dict()
        if doc["spec"].get("nodeName") in nodes and not doc["metadata"].get("deletionTimestamp"):
            out[doc["spec"]["nodeName"]] = (doc["metadata"]["uid"], driver_version(doc))
    return out


def _upgrade_message(client: Client) -> str:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return str(((obj.get("status") or {}).get("driverUpgrade") or {}).get("message", ""))


@pytest.mark.timeout(480)
def test_a_rollout_outside_its_window_waits_and_starts_when_the_window_opens(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    register_operand_agents(sim_program)
    install_crds(client=client)
    names = sorted(sim_nodes("pcie-l4:2"))
    clock = Clock(FRIDAY_NOON)
    body = policy(version=OLD, max_parallel=1)
    body["spec"]["maintenanceWindows"] = WINDOWS
    with OperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace, clock=clock):
        client.create(codecs.from_dict(body))
        try:
            wait_for(lambda: set(node_states(client, names).values()) == {m.DONE}, timeout=240,
                     describe="both nodes upgrade-done on the first version")  # fmt: skip
            before = _drivers(client, namespace, names)
            client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                         patch_type=PatchType.MERGE)  # fmt: skip
            wait_for(lambda: set(node_states(client, names).values()) == {m.REQUIRED}, timeout=60,
                     describe="both nodes marked upgrade-required")  # fmt: skip
            watched_until = time.monotonic() + 5
            while time.monotonic() < watched_until:  # outside the window: nothing disruptive starts
                assert set(node_states(client, names).values()) == {m.REQUIRED}
                assert not any(client.get(Node, n).spec.unschedulable for n in names)  # type: ignore[union-attr]
                assert _drivers(client, namespace, names) == before
                time.sleep(0.2)
            wait_for(lambda: "the next opens 2026-12-05 02:00 UTC" in _upgrade_message(client), timeout=30,
                     describe="the upgrade status saying when the window opens")  # fmt: skip

            clock.now = SATURDAY_2AM
            client.patch(Node, names[0], {"metadata": {"annotations": {"test/clock": "moved"}}},
                         patch_type=PatchType.MERGE)  # fmt: skip
            wait_for(lambda: set(node_states(client, names).values()) == {m.DONE}
                     and {v for _, v in _drivers(client, namespace, names).values()} == {NEW},
                     timeout=300, describe="both nodes upgraded inside the window")  # fmt: skip
            after = _drivers(client, namespace, names)
            assert all(after[n][0] != before[n][0] for n in names)  # each driver pod replaced
            assert not any(client.get(Node, n).spec.unschedulable for n in names)  # type: ignore[union-attr]
        finally:
            client.delete(ClusterPolicyResource, "cluster-policy")
