"""Rolling driver upgrades on the real control plane with 20 simulated GPU nodes.

A ClusterPolicy with ``maxParallelUpgrades: 3`` brings the nodes up on one driver version; GPU
workloads run on some of them. ``gpu-operator upgrade plan`` previews the change to a new version;
then the change is applied and the operator rolls it while the test restarts the operator the first
time it sees each state. The rollout never has more than 3 nodes in progress, starts nodes in the
preview's waves, replaces each driver pod exactly once (no disruptive step repeated across
restarts), uncordons every node it cordoned, and ends with every node ``upgrade-done`` on the new
version except the one whose simulated driver install fails: that one ends ``upgrade-failed``, and
recovers by itself once its driver installs again.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.cli.main import cli
from gpu_operator.kube.api import ClusterPolicyResource, NVIDIADriverResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.images import driver_version
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.upgrade import model as m
from tests.chaos.harness import NEW, OLD, policy, running, trainer
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
IDLE = {m.UNKNOWN, m.DONE, m.REQUIRED}


@pytest.fixture
def upgrading_operator(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[OperatorThread]:
    install_crds(client=client)
    # A failing driver is given up after 2 restarts (upstream: 10) so the test does not sit in back-off.
    with OperatorThread(cluster=local_cluster, namespace=namespace, max_driver_restarts=2) as op:
        yield op
    for resource in (ClusterPolicyResource, NVIDIADriverResource):
        for obj in client.list(resource):
            client.delete(resource, str(obj.metadata.name))  # type: ignore[union-attr]


class Recorder:
    """Polls the nodes and driver pods every 50 ms: states, cordons, driver pod uids, start order."""

    def __init__(self, client: Client, *, nodes: list[str], namespace: str) -> None:
        self.client, self.nodes, self.namespace = client, set(nodes), namespace
        self.max_in_progress = 0
        self.start_order: list[str] = []
        self.seen_states: list[str] = []
        self.cordon_flips: dict[str, list[bool]] = defaultdict(list)
        self.driver_uids: dict[str, set[str]] = defaultdict(set)
        self.driver_replaced: dict[str, float] = {}  # node -> when its second driver pod was first seen
        # trainer pod uid -> (its node, when it was last seen running there, not terminating)
        self.trainer_last: dict[str, tuple[str, float]] = {}
        self.passes = 0  # completed polls: the test waits for one that began after the rollout ended
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            nodes = [n.to_dict() for n in self.client.list(Node) if n.metadata and n.metadata.name in self.nodes]
            pods = self.client.list(
                Pod, namespace=self.namespace, labels={"app.kubernetes.io/component": "nvidia-driver"}
            )
            now = time.monotonic()
            for p in pods:
                if p.spec and p.spec.nodeName in self.nodes and p.metadata and p.metadata.uid:
                    self.driver_uids[p.spec.nodeName].add(p.metadata.uid)
                    if len(self.driver_uids[p.spec.nodeName]) == 2:
                        self.driver_replaced.setdefault(p.spec.nodeName, now)
            for t in self.client.list(Pod, namespace=self.namespace, labels={"app": "trainer"}):
                if t.spec and t.spec.nodeName and t.metadata and t.metadata.uid and not t.metadata.deletionTimestamp:
                    self.trainer_last[t.metadata.uid] = (t.spec.nodeName, now)
            busy = []
            for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
                name = node["metadata"]["name"]
                state = (node["metadata"].get("labels") or {}).get(m.STATE_LABEL, "")
                if state not in self.seen_states:
                    self.seen_states.append(state)
                if state not in IDLE:
                    busy.append(name)
                    if name not in self.start_order:
                        self.start_order.append(name)
                cordoned = bool((node.get("spec") or {}).get("unschedulable"))
                flips = self.cordon_flips[name]
                if not flips or flips[-1] != cordoned:
                    flips.append(cordoned)
            self.max_in_progress = max(self.max_in_progress, len(busy))
            self.passes += 1

    def catch_up(self) -> None:
        """Return once a whole poll has run after this call: the recorder has seen what the test saw."""
        target = self.passes + 2  # the poll under way may have read the nodes before the last change
        wait_for(lambda: self.passes >= target, timeout=30, describe="the recorder's next whole poll")


def _states(client: Client, nodes: list[str]) -> dict[str, str]:
    return {n: (client.get(Node, n).metadata.labels or {}).get(m.STATE_LABEL, "") for n in nodes}  # type: ignore[union-attr]


@pytest.mark.timeout(900)
def test_rolling_driver_upgrade_of_20_nodes(
    client: Client,
    namespace: str,
    upgrading_operator: OperatorThread,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    tmp_path: Path,
) -> None:
    registry = agent_registry()
    for name in ("toolkit", "device-plugin", "validator", "driver-manager", "driver"):
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)
    nodes = sorted(sim_nodes("pcie-l4:20"))
    failing = nodes[-1]  # the last in start order: its failure cannot change the earlier waves
    simulator.fail_driver_install(failing, version=NEW)
    client.create(codecs.from_dict(policy(version=OLD, max_parallel=3)))

    def all_done() -> bool:
        return set(_states(client, nodes).values()) == {m.DONE}

    wait_for(all_done, timeout=300, describe="every node upgrade-done on the first version")
    wait_for(lambda: _ready_policy(client), timeout=120, describe="ClusterPolicy ready")
    client.create(trainer(namespace, replicas=4))
    wait_for(lambda: running(client, namespace) == 4, timeout=120, describe="4 trainer pods running")
    trainers = list(client.list(Pod, namespace=namespace, labels={"app": "trainer"}))
    trainer_nodes = {p.spec.nodeName for p in trainers}  # type: ignore[union-attr]
    trainer_uids = {str(p.metadata.uid) for p in trainers}  # type: ignore[union-attr]

    # The preview of the change, from the live cluster.
    proposed = tmp_path / "policy.yaml"
    proposed.write_text(yaml.safe_dump(policy(version=NEW, max_parallel=3)), encoding="utf-8")
    kubeconfig = str(upgrading_operator.cluster.kubeconfig_path)
    shown = CliRunner().invoke(
        cli, ["upgrade", "plan", "--kubeconfig", kubeconfig, "--namespace", namespace, "--policy", str(proposed),
              "-o", "json"],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    waves = [w["nodes"] for w in report["waves"]]
    assert [len(w) for w in waves] == [3, 3, 3, 3, 3, 3, 2]
    assert sorted(n for w in waves for n in w) == nodes
    assert report["installSecondsMeasured"] is True
    by_node = {n["node"]: n for n in report["nodes"]}
    for node in nodes:
        assert (by_node[node]["version"], by_node[node]["targetVersion"]) == (OLD, NEW)
        assert by_node[node]["restartOnly"] is False  # a new version means a reinstall
    assert {
        n for n, f in by_node.items() if any(e.startswith(f"{namespace}/trainer-") for e in f["evicts"])
    } == trainer_nodes
    assert _states(client, nodes) == dict.fromkeys(nodes, m.DONE)  # the preview changed nothing

    recorder = Recorder(client, nodes=nodes, namespace=namespace)
    recorder.thread.start()
    client.patch(
        ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}}, patch_type=PatchType.MERGE
    )
    restarted: list[str] = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            states = _states(client, nodes)
            if all(states[n] == m.DONE for n in nodes[:-1]) and states[failing] == m.FAILED:
                recorder.catch_up()
                break
            # Kill the operator the first time each state shows up; the new one must carry on.
            fresh = [s for s in recorder.seen_states if s not in IDLE and s not in restarted]
            if fresh:
                restarted.extend(fresh)
                upgrading_operator.restart()
            time.sleep(0.2)
        else:
            pytest.fail(f"rollout did not finish: {_states(client, nodes)}")
    finally:
        recorder.stop.set()
        recorder.thread.join(timeout=10)

    assert recorder.max_in_progress <= 3
    # GPU pods were evicted before the driver under them was replaced (their replacements, new pods
    # that may land on the node once it is uncordoned again, do not count).
    for uid in trainer_uids:
        node, last = recorder.trainer_last[uid]
        assert last < recorder.driver_replaced[node], (node, uid)
    # A wave's nodes start in one pass, their patches concurrently: the groups must match, not the order inside.
    observed = [sorted(recorder.start_order[i : i + len(w)]) for i, w in _offsets(waves)]
    assert observed == [sorted(w) for w in waves]
    assert {m.POD_DELETION, m.POD_RESTART, m.VALIDATION} <= set(restarted)
    for node in nodes[:-1]:
        pod = _driver_pod(client, namespace, node)
        assert driver_version(pod) == NEW  # NVIDIA's driver image: the version is its tag
        assert len(recorder.driver_uids[node]) == 2, node  # replaced exactly once despite the restarts
        assert recorder.cordon_flips[node] == [False, True, False], node  # cordoned once, uncordoned once
    failed = client.get(Node, failing).to_dict()
    assert failed["spec"].get("unschedulable") is True  # left cordoned for the administrator
    assert "restarted" in failed["metadata"]["annotations"][m.FAILURE_REASON]
    assert len(recorder.driver_uids[failing]) == 2
    events = [e.to_dict() for e in client.list(Event, namespace="default", fields={"reason": m.EVENT_REASON})]
    assert any(e["involvedObject"]["name"] == failing and e["type"] == "Warning" for e in events)
    wait_for(lambda: running(client, namespace) == 4, timeout=120, describe="evicted trainers running again")
    progress = _upgrade_status(client)
    assert progress["autoUpgrade"] is True
    assert progress["nodes"] == {m.DONE: 19, m.FAILED: 1}
    assert progress["message"].startswith("0 upgrading, 19 done, 1 failed of 20 node(s)")

    # The failed node recovers by itself once its driver installs (the container's next restart).
    simulator.fail_driver_install(failing, fail=False)
    wait_for(lambda: _states(client, [failing])[failing] == m.DONE, timeout=180, describe="failed node recovered")
    assert not client.get(Node, failing).to_dict()["spec"].get("unschedulable")
    wait_for(lambda: _upgrade_status(client).get("nodes") == {m.DONE: 20}, timeout=30, describe="status: 20 done")


def _offsets(waves: list[list[str]]) -> Iterator[tuple[int, list[str]]]:
    offset = 0
    for wave in waves:
        yield offset, wave
        offset += len(wave)


def _upgrade_status(client: Client) -> JSON:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return dict((obj.get("status") or {}).get("driverUpgrade") or {})


def _ready_policy(client: Client) -> bool:
    obj: JSON = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return (obj.get("status") or {}).get("state") == "ready"


def _driver_pod(client: Client, namespace: str, node: str) -> JSON:
    pods = client.list(Pod, namespace=namespace, labels={"app.kubernetes.io/component": "nvidia-driver"},
                       fields={"spec.nodeName": node})  # fmt: skip
    live = [p.to_dict() for p in pods if not (p.metadata and p.metadata.deletionTimestamp)]
    assert len(live) == 1, live
    return live[0]
