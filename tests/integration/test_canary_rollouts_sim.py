"""Canary driver rollouts on the real control plane with simulated GPU nodes (issue 21).

Three nodes run the first driver; the policy's canary stage takes one node first and soaks it 3 s.

1. A bad driver: its install fails on the canary (the simulator's driver fault), so the canary's
   upgrade fails. The rollout halts and rolls back by itself: the reconciler renders the last good
   driver again, the canary returns to it and is uncordoned, the rollout ConfigMap says
   ``rolled-back`` and the policy's status names why. The other two nodes never changed: their
   driver pods are the same, they were never cordoned, never went past ``upgrade-required``.
2. A good driver next: ``gpu-operator upgrade plan`` shows the canary stage first; the canary passes
   the gate and soaks (the operator is restarted while it soaks: the new process carries on without
   upgrading the canary again), then every node gets it; the rollout keeps it as the new last good
   driver.
3. A failing driver without ``autoRollback``: the rollout halts with the canary left failed, and
   ``gpu-operator upgrade rollback`` takes it back; the other nodes again never change.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, codecs
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.cli.main import cli
from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.names.images import driver_version
from gpu_operator.reconcile.operator import OperatorThread
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.upgrade import canary as c
from gpu_operator.upgrade import model as m
from tests.chaos.harness import NEW, OLD, node_states, policy
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory, register_operand_agents

JSON = dict[str, Any]
GOOD_NEXT = "580.82.07"
HALTING = "580.95.05"
CANARY = {"nodes": 1, "soakSeconds": 3, "gates": {"exporterReady": False}}
ADVANCED = {m.UNKNOWN, m.DONE, m.REQUIRED}  # what a node the canary stage holds may show


class Watcher:
    """Polls every 100 ms: each node's states, whether it was ever cordoned, its driver pod uids."""

    def __init__(self, client: Client, *, nodes: list[str], namespace: str) -> None:
        self.client, self.nodes, self.namespace = client, nodes, namespace
        self.states: dict[str, set[str]] = defaultdict(set)
        self.cordoned: set[str] = set()
        self.uids: dict[str, set[str]] = defaultdict(set)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for name in self.nodes:
                node = self.client.get(Node, name)
                self.states[name].add((node.metadata.labels or {}).get(m.STATE_LABEL, ""))  # type: ignore[union-attr]
                if node.spec and node.spec.unschedulable:
                    self.cordoned.add(name)
            for pod in self.client.list(Pod, namespace=self.namespace, labels={"app.kubernetes.io/component":
                                                                                   "nvidia-driver"}):  # fmt: skip
                if pod.spec and pod.spec.nodeName in self.nodes and pod.metadata and pod.metadata.uid:
                    self.uids[pod.spec.nodeName].add(pod.metadata.uid)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def _drivers(client: Client, namespace: str) -> dict[str, tuple[str, str]]:
    """node -> (driver pod uid, its driver version), for pods not being deleted."""
    out = {}
    for pod in client.list(Pod, namespace=namespace, labels={"app.kubernetes.io/component": "nvidia-driver"}):
        doc = pod.to_dict()
        if doc["spec"].get("nodeName") and not doc["metadata"].get("deletionTimestamp"):
            out[doc["spec"]["nodeName"]] = (doc["metadata"]["uid"], driver_version(doc))
    return out


def _rollout(client: Client, namespace: str) -> dict[str, str]:
    try:
        return dict(client.get(ConfigMap, keys.DRIVER_ROLLOUT_CONFIGMAP, namespace=namespace).data or {})
    except Exception:  # not written yet
        return {}


def _upgrade_message(client: Client) -> str:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return str(((obj.get("status") or {}).get("driverUpgrade") or {}).get("message", ""))


def _proposal(client: Client, folder: Path, *, version: str) -> Path:
    """The live ClusterPolicy with another driver version, as a file for ``upgrade plan --policy``."""
    doc: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    body = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": "cluster-policy"},
            "spec": {**doc["spec"], "driver": {**doc["spec"]["driver"], "version": version}}}  # fmt: skip
    path = folder / "proposed.yaml"
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _plan(cluster: LocalCluster, namespace: str, proposed: Path) -> JSON:
    shown = CliRunner().invoke(cli, ["upgrade", "plan", "--kubeconfig", str(cluster.kubeconfig_path), "--namespace",
                                     namespace, "--policy", str(proposed), "-o", "json"])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    report: JSON = json.loads(shown.output)
    return report


def _canary_status(client: Client) -> JSON:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return dict(((obj.get("status") or {}).get("driverUpgrade") or {}).get("canary") or {})


@pytest.fixture
def three_nodes(sim_nodes: SimNodesFactory, sim_program: SimProgramFactory, client: Client) -> list[str]:
    register_operand_agents(sim_program)
    install_crds(client=client)
    return sorted(sim_nodes("pcie-l4:3"))


@pytest.mark.timeout(900)
def test_a_bad_driver_halts_on_its_canary_and_rolls_back_and_a_good_one_completes(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    simulator: Simulator,
    three_nodes: list[str],
    tmp_path: Path,
) -> None:
    names = three_nodes
    canary, others = names[0], names[1:]
    body = policy(version=OLD, max_parallel=1)
    body["spec"]["driver"]["upgradePolicy"]["canary"] = CANARY
    with OperatorThread(kubeconfig=local_cluster.kubeconfig_path, namespace=namespace, max_driver_restarts=2) as op:
        client.create(codecs.from_dict(body))
        try:
            wait_for(lambda: set(node_states(client, names).values()) == {m.DONE}, timeout=240,
                     describe="every node upgrade-done on the first driver")  # fmt: skip
            wait_for(lambda: json.loads(_rollout(client, namespace).get("goodDriver") or "{}").get("version") == OLD,
                     timeout=30, describe="the first driver kept as the last good one")  # fmt: skip
            before = _drivers(client, namespace)

            # 1. A driver that fails on its canary.
            simulator.fail_driver_install(canary, version=NEW)
            with Watcher(client, nodes=names, namespace=namespace) as watched:
                client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                             patch_type=PatchType.MERGE)  # fmt: skip
                wait_for(lambda: _rollout(client, namespace).get("phase") == c.ROLLED_BACK, timeout=300,
                         describe="the rollout rolled back")  # fmt: skip
                wait_for(lambda: node_states(client, [canary])[canary] == m.DONE, timeout=60,
                         describe="the canary upgrade-done again")  # fmt: skip
            rollout = _rollout(client, namespace)
            assert rollout["canaries"] == canary
            assert "restarted" in rollout["reason"]  # the canary's driver pod never became ready
            after = _drivers(client, namespace)
            assert after[canary][1] == OLD  # back on the last good driver
            assert after[canary][0] != before[canary][0]
            assert len(watched.uids[canary]) >= 3  # the good pod, the bad one, and the good one again
            assert m.POD_RESTART in watched.states[canary]
            assert not client.get(Node, canary).spec.unschedulable  # type: ignore[union-attr]
            for node in others:  # never touched
                assert after[node] == before[node]
                assert watched.uids[node] == {before[node][0]}
                assert node not in watched.cordoned
                assert watched.states[node] <= ADVANCED, watched.states[node]
            status = _canary_status(client)
            assert status["phase"] == c.ROLLED_BACK
            assert status["goodVersion"] == OLD
            reasons = {e.reason for e in client.list(Event, namespace="default")
                       if e.involvedObject.kind == "ClusterPolicy"}  # fmt: skip
            assert {"DriverCanaryStarted", "DriverRollingBack", "DriverRolledBack"} <= reasons

            # 2. A good driver next: the preview shows the canary stage; the canary soaks, then every node gets it.
            simulator.fail_driver_install(canary, fail=False)
            proposed = _proposal(client, tmp_path, version=GOOD_NEXT)
            report = _plan(local_cluster, namespace, proposed)
            assert report["canary"]["nodes"] == [canary]
            assert report["waves"][0]["nodes"] == [canary]
            assert {n for w in report["waves"][1:] for n in w["nodes"]} == set(others)
            assert report["canary"]["othersStartAfterSeconds"] >= CANARY["soakSeconds"]
            assert report["waves"][1]["startSeconds"] >= report["canary"]["othersStartAfterSeconds"]
            with Watcher(client, nodes=names, namespace=namespace) as watched:
                client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": GOOD_NEXT}}},
                             patch_type=PatchType.MERGE)  # fmt: skip
                wait_for(lambda: _rollout(client, namespace).get("phase") == c.SOAKING, timeout=240,
                         describe="the canary soaking")  # fmt: skip
                soaking = _drivers(client, namespace)
                assert soaking[canary][1] == GOOD_NEXT
                assert all(soaking[n] == after[n] for n in others)  # still waiting for the gate
                # A new operator process mid-soak continues from the ConfigMap and the nodes.
                op.restart()
                wait_for(lambda: set(node_states(client, names).values()) == {m.DONE}
                         and {v for _, v in _drivers(client, namespace).values()} == {GOOD_NEXT},
                         timeout=300, describe="every node on the good driver")  # fmt: skip
                wait_for(lambda: _rollout(client, namespace).get("goodVersion") == GOOD_NEXT, timeout=30,
                         describe="the good driver kept as the last good one")  # fmt: skip
            assert _rollout(client, namespace)["phase"] == c.IDLE
            assert watched.uids[canary] == {soaking[canary][0], after[canary][0]}  # upgraded once, not again
            assert op.operator is not None
            wait_for(lambda: 'gpu_operator_driver_rollout_phase{phase="idle"} 1' in op.operator.metric_lines(),  # type: ignore[union-attr]
                     timeout=30, describe="the rollout phase on /metrics")  # fmt: skip
            reasons = {e.reason for e in client.list(Event, namespace="default")
                       if e.involvedObject.kind == "ClusterPolicy"}  # fmt: skip
            assert {"DriverCanarySoaking", "DriverCanaryPassed", "DriverRolloutComplete"} <= reasons
            done = _drivers(client, namespace)

            # 3. Without autoRollback a failing canary only halts the rollout; `upgrade rollback` takes it back.
            simulator.fail_driver_install(canary, version=HALTING)
            with Watcher(client, nodes=names, namespace=namespace) as watched:
                halting = {"version": HALTING, "upgradePolicy": {"canary": {"autoRollback": False}}}
                client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": halting}},
                             patch_type=PatchType.MERGE)  # fmt: skip
                wait_for(lambda: _rollout(client, namespace).get("phase") == c.HALTED, timeout=300,
                         describe="the rollout halted")  # fmt: skip
                assert node_states(client, [canary])[canary] == m.FAILED  # left as it failed, for a look
                assert "rollout halted" in _upgrade_message(client)
                rollback = ["upgrade", "rollback", "--kubeconfig", str(local_cluster.kubeconfig_path),
                            "--namespace", namespace]  # fmt: skip
                shown = CliRunner().invoke(cli, rollback)
                assert shown.exit_code == 0, shown.output
                assert f"return from driver {HALTING} to {GOOD_NEXT}" in shown.output
                wait_for(lambda: _rollout(client, namespace).get("phase") == c.ROLLED_BACK, timeout=300,
                         describe="the halted rollout rolled back by hand")  # fmt: skip
                wait_for(lambda: node_states(client, [canary])[canary] == m.DONE, timeout=60,
                         describe="the canary upgrade-done again")  # fmt: skip
            back = _drivers(client, namespace)
            assert back[canary][1] == GOOD_NEXT
            for node in others:
                assert back[node] == done[node]
                assert node not in watched.cordoned
            again = CliRunner().invoke(cli, rollback)
            assert again.exit_code != 0
            assert "rolled-back" in again.output
        finally:
            client.delete(ClusterPolicyResource, "cluster-policy")
