"""Simulated GPU nodes on the real control plane: four nodes of different profiles register with realistic
labels, run DaemonSet pods as in-process programs, report pod status like a kubelet, and stay Ready (no
unreachable/not-ready taints) past the node-lifecycle controller's grace period, renewing their Leases and
posting status all along, while the other tests of this module use them."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from lightkube import ApiError, Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.heartbeat import LEASE_INTERVAL, STATUS_INTERVAL
from gpu_operator.sim.objects import PROFILE_LABEL, SIM_LABEL, node_healthy
from gpu_operator.sim.programs.context import ProgramContext
from tests.integration.conftest_sim import SimProgramFactory

JSON = dict[str, Any]
PROFILES = ("dgx-h100", "a100-mig", "pcie-l4", "cpu-only")
#: kube-controller-manager's --node-monitor-grace-period (its default; the local cluster keeps it) and
#: --node-monitor-period: a node whose heartbeats stopped is marked not Ready within their sum.
NODE_MONITOR_GRACE = 50.0
NODE_MONITOR_PERIOD = 5.0
#: How long the nodes must stay Ready: a grace period and a monitor period past the first clean sample, and
#: one Lease interval more, so a heartbeat that stopped at any moment of the window would have been seen.
#: The heartbeats themselves are counted too (each Lease renewed, each node's status posted again), which
#: proves they go on more directly than a longer window would.
READY_WINDOW = NODE_MONITOR_GRACE + NODE_MONITOR_PERIOD + LEASE_INTERVAL
AGENT = ["gpu-operator", "agent"]


def _get(client: Client, kind: type[Any], name: str, namespace: str | None = None) -> JSON:
    obj = client.get(kind, name, namespace=namespace) if namespace else client.get(kind, name)
    result: JSON = obj.to_dict()
    return result


def _create(client: Client, manifest: JSON) -> None:
    client.create(codecs.from_dict(manifest))


@dataclass
class Monitor:
    """Polls the nodes every 2 s from a thread; records any moment one was not Ready or was tainted, and
    every Lease renewal and node-status heartbeat it saw."""

    client: Client
    names: list[str]
    samples: int = 0
    clean_since: dict[str, float] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    renewals: dict[str, set[str]] = field(default_factory=dict)  # node -> the Lease renewTimes seen
    heartbeats: dict[str, set[str]] = field(default_factory=dict)  # node -> the Ready lastHeartbeatTimes seen
    stop: threading.Event = field(default_factory=threading.Event)
    violated: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(2.0):
            try:
                self.sample()
            except Exception as error:  # recorded and asserted on, never raised in a thread
                self.errors.append(repr(error))
                self.violated.set()

    def sample(self) -> None:
        for name in self.names:
            node = _get(self.client, Node, name)
            conditions = {c["type"]: c for c in node["status"].get("conditions", [])}
            ready = conditions.get("Ready", {}).get("status")
            self.heartbeats.setdefault(name, set()).add(str(conditions.get("Ready", {}).get("lastHeartbeatTime")))
            lease = _get(self.client, Lease, name, "kube-node-lease")
            self.renewals.setdefault(name, set()).add(str(lease["spec"]["renewTime"]))
            taints = [t["key"] for t in node.get("spec", {}).get("taints", [])]
            healthy = node_healthy(node)
            if name not in self.clean_since:
                # A new node carries the not-ready taint until the controller first sees it Ready.
                if healthy:
                    self.clean_since[name] = time.monotonic()
            elif not healthy:
                self.violations.append(f"{name}: Ready={ready} taints={taints}")
                self.violated.set()
        self.samples += 1


@pytest.fixture(scope="module")
def nodes(simulator: Simulator, local_cluster: LocalCluster) -> Iterator[tuple[list[str], Monitor]]:
    names = simulator.add_nodes(",".join(f"{p}:1" for p in PROFILES))
    client = local_cluster.client()
    monitor = Monitor(client=client, names=names)
    thread = threading.Thread(target=monitor.run, name="ready-monitor", daemon=True)
    thread.start()
    try:
        yield names, monitor
    finally:
        monitor.stop.set()
        thread.join(timeout=10)
        client.close()
        simulator.remove_nodes(names)


def _daemonset(namespace: str, name: str, command: list[str]) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {SIM_LABEL: "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "agent", "image": "gpu-operator:test", "command": command}],
                },
            },
        },
    }


def test_nodes_carry_labels_capacity_and_node_info(client: Client, nodes: tuple[list[str], Monitor]) -> None:
    names, _ = nodes
    by_profile = {(n := _get(client, Node, name))["metadata"]["labels"][PROFILE_LABEL]: n for name in names}
    h100 = by_profile["dgx-h100"]
    labels = h100["metadata"]["labels"]
    info = h100["status"]["nodeInfo"]
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-0302_10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/system-os_release.ID"] == "ubuntu"
    assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "22.04"
    assert labels["feature.node.kubernetes.io/kernel-version.full"] == info["kernelVersion"]
    assert labels["feature.node.kubernetes.io/kernel-version.major"] == info["kernelVersion"].split(".")[0]
    assert (labels["kubernetes.io/os"], labels["kubernetes.io/arch"]) == ("linux", "amd64")
    assert labels["kubernetes.io/hostname"] == h100["metadata"]["name"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert info["osImage"].startswith("Ubuntu 22.04")
    assert h100["status"]["capacity"]["cpu"] == "224"
    assert by_profile["pcie-l4"]["status"]["capacity"]["pods"] == "110"
    cpu_labels = by_profile["cpu-only"]["metadata"]["labels"]
    assert "feature.node.kubernetes.io/pci-10de.present" not in cpu_labels
    assert "feature.node.kubernetes.io/kernel-version.full" in cpu_labels
    assert (
        _get(client, Lease, h100["metadata"]["name"], "kube-node-lease")["spec"]["holderIdentity"]
        == h100["metadata"]["name"]
    )


def test_daemonset_pods_run_and_become_ready(
    client: Client, namespace: str, nodes: tuple[list[str], Monitor], simulator: Simulator
) -> None:
    names, _ = nodes
    _create(client, _daemonset(namespace, "sleeper", [*AGENT, "sleep"]))

    def all_ready() -> JSON | None:
        status = _get(client, DaemonSet, "sleeper", namespace).get("status", {})
        desired = status.get("desiredNumberScheduled", 0)
        return status if desired >= len(names) and status.get("numberReady") == desired else None

    status = wait_for(all_ready, timeout=60, describe="DaemonSet sleeper ready on every simulated node")
    assert status["desiredNumberScheduled"] == len(names)
    pods = [p.to_dict() for p in client.list(Pod, namespace=namespace)]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(names)
    pod = pods[0]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]} == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    container = pod["status"]["containerStatuses"][0]
    assert (container["ready"], container["started"], container["restartCount"]) == (True, True, 0)
    assert "running" in container["state"]

    # An injected crash: the program raises, the container restarts (restartPolicy Always).
    assert "crashed" in simulator.crash(pod["spec"]["nodeName"], namespace=namespace, program="sleep")

    def restarted() -> JSON | None:
        c = _get(client, Pod, pod["metadata"]["name"], namespace)["status"]["containerStatuses"][0]
        return c if c["restartCount"] == 1 and c["ready"] and "running" in c["state"] else None

    after = wait_for(restarted, timeout=30, describe="the crashed container restarted")
    assert after["lastState"]["terminated"]["exitCode"] == 1
    assert "crash injected" in after["lastState"]["terminated"]["message"]
    wait_for(all_ready, timeout=30, describe="DaemonSet ready again")

    # Graceful deletion: programs stop, the pods go away.
    client.delete(DaemonSet, "sleeper", namespace=namespace)
    wait_for(lambda: not list(client.list(Pod, namespace=namespace)), timeout=60, describe="DaemonSet pods deleted")


def test_unknown_command_fails_with_a_clear_reason(
    client: Client, namespace: str, nodes: tuple[list[str], Monitor]
) -> None:
    names, _ = nodes
    command = ["nginx", "-g", "daemon off;"]
    container = {"name": "nginx", "image": "nginx:1.27", "command": command}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": namespace}}
    _create(client, {**pod, "spec": {"nodeName": names[0], "containers": [container]}})

    def waiting() -> JSON | None:
        statuses = _get(client, Pod, "web", namespace).get("status", {}).get("containerStatuses")
        state = statuses[0]["state"].get("waiting") if statuses else None
        # As a real kubelet's, the first status written may still say ContainerCreating: wait past it.
        return state if state and state.get("reason") != "ContainerCreating" else None

    state = wait_for(waiting, timeout=30, describe="the nginx container waiting with its reason")
    assert state["reason"] == "UnknownProgram"
    assert "nginx -g daemon off;" in state["message"]
    assert _get(client, Pod, "web", namespace)["status"]["phase"] == "Pending"


def _context_objects(*, namespace: str, node: str) -> list[JSON]:
    meta = {"namespace": namespace}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": "agent-config"}}
    app = {
        "name": "main",
        "image": "gpu-operator:test",
        "command": [*AGENT, "capture"],
        "args": ["--flag", "value"],
        "readinessProbe": {"exec": {"command": ["true"]}},
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "FROM_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "agent-config", "key": "flag"}}},
            {"name": "GREETING", "value": "hello $(POD_NAME)"},
        ],
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/agent"},
            {"name": "validations", "mountPath": "/run/nvidia/validations"},
        ],
    }
    init = {"name": "wait", "image": "gpu-operator:test", "command": [*AGENT, "sleep", "0.2"]}
    volumes = [
        {
            "name": "config",
            "configMap": {"name": "agent-config", "items": [{"key": "config.yaml", "path": "config.yaml"}]},
        },
        {"name": "validations", "hostPath": {"path": "/run/nvidia/validations", "type": "DirectoryOrCreate"}},
    ]
    spec = {"nodeName": node, "initContainers": [init], "containers": [app], "volumes": volumes}
    return [
        {**config, "data": {"config.yaml": "key: value\n", "flag": "yes"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": "ctx"}, "spec": spec},
    ]


def test_pod_context_env_volumes_and_init_containers(
    client: Client,
    namespace: str,
    nodes: tuple[list[str], Monitor],
    sim_program: SimProgramFactory,
    simulator: Simulator,
) -> None:
    names, _ = nodes
    seen: dict[str, Any] = {}

    async def capture(ctx: ProgramContext) -> None:
        seen["ctx"] = ctx
        seen["config"] = ctx.path("/etc/agent/config.yaml").read_text(encoding="utf-8")
        seen["token"] = ctx.path("/var/run/secrets/kubernetes.io/serviceaccount/token").read_text(encoding="utf-8")
        ctx.path("/run/nvidia/validations/driver-ready").write_text("ok", encoding="utf-8")
        ctx.set_ready()
        await ctx.stopped()
        seen["stopped"] = True

    sim_program("capture", capture)
    for manifest in _context_objects(namespace=namespace, node=names[0]):
        _create(client, manifest)

    def running() -> JSON | None:
        status = _get(client, Pod, "ctx", namespace).get("status", {})
        ready = status.get("phase") == "Running" and status["containerStatuses"][0]["ready"]
        return status if ready else None

    status = wait_for(running, timeout=30, describe="pod ctx running and ready")
    ctx: ProgramContext = seen["ctx"]
    assert (ctx.node_name, ctx.argv) == (names[0], ("--flag", "value"))
    assert (ctx.env["NODE_NAME"], ctx.env["POD_NAME"], ctx.env["POD_NAMESPACE"]) == (names[0], "ctx", namespace)
    assert (ctx.env["FROM_CONFIG"], ctx.env["GREETING"]) == ("yes", "hello ctx")
    assert seen["config"] == "key: value\n"
    assert seen["token"].count(".") == 2  # a real JWT from the TokenRequest API
    host_file = simulator.node(names[0]).host_root / "run" / "nvidia" / "validations" / "driver-ready"
    assert host_file.read_text(encoding="utf-8") == "ok"  # hostPath lands in the node's host root
    init = status["initContainerStatuses"][0]["state"]["terminated"]
    assert (init["reason"], init["exitCode"]) == ("Completed", 0)

    client.delete(Pod, "ctx", namespace=namespace)

    def gone() -> bool:
        try:
            client.get(Pod, "ctx", namespace=namespace)
        except ApiError as error:
            return error.status.code == 404
        return False

    wait_for(gone, timeout=30, describe="pod ctx deleted")
    assert seen.get("stopped") is True


def _renewed(client: Client, name: str) -> dt.datetime:
    renewed = _get(client, Lease, name, "kube-node-lease")["spec"]["renewTime"]
    return dt.datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))


def test_heartbeats_go_on_while_pod_requests_hold_every_connection(
    client: Client, nodes: tuple[list[str], Monitor], simulator: Simulator
) -> None:
    """At 1,000 nodes the pods' requests queued by thousands; the Lease renewals must not wait behind them."""
    names, _ = nodes
    api = simulator.core.api
    held = api.max_connections  # every connection of the pod client

    async def hold() -> list[asyncio.Task[None]]:
        async def watch() -> None:
            params = {"timeoutSeconds": "40"}
            async for _ in api.watch("/api/v1/namespaces/default/configmaps", params=params):
                pass

        return [asyncio.create_task(watch()) for _ in range(held)]

    async def pod_request_waits() -> bool:
        # The private client only to prove the premise: with every connection held, a pod request gets none.
        try:
            await api._http.get("/version", timeout=httpx.Timeout(0.5))
        except httpx.PoolTimeout:
            return True
        return False

    async def release(tasks: list[asyncio.Task[None]]) -> bool:
        running = all(not t.done() for t in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return running

    began = dt.datetime.now(dt.UTC)
    tasks = simulator.call(hold())
    try:
        # The watches take every connection as they start: a request finds none once they all have.
        wait_for(lambda: simulator.call(pod_request_waits()), timeout=10,
                 describe="the watches holding every connection of the pod client")  # fmt: skip
        wait_for(
            lambda: all(_renewed(client, n) > began for n in names),
            timeout=25,
            describe="every Lease renewed while the pod client had no free connection",
        )
    finally:
        still_held = simulator.call(release(tasks))
    assert still_held, "a held watch ended early: the pool was not full for the whole test"


@pytest.mark.timeout(300)
def test_nodes_stay_ready_past_the_grace_period(nodes: tuple[list[str], Monitor], client: Client) -> None:
    """Last in the module: the nodes lived through the other tests; keep watching until the window ends."""
    names, monitor = nodes
    wait_for(lambda: len(monitor.clean_since) == len(names), timeout=60, describe="every node Ready and untainted")
    first = min(monitor.clean_since.values())
    # Not a sleep: the monitor wakes this at once on the first violation or error.
    monitor.violated.wait(timeout=max(first + READY_WINDOW - time.monotonic(), 0.0))
    assert not monitor.violations, monitor.violations
    assert not monitor.errors, monitor.errors
    assert monitor.samples >= READY_WINDOW / 3
    for name in names:
        # Leases renewed every LEASE_INTERVAL and status posted every STATUS_INTERVAL, seen by 2 s samples.
        assert len(monitor.renewals[name]) >= READY_WINDOW // LEASE_INTERVAL - 1, (name, monitor.renewals[name])
        assert len(monitor.heartbeats[name]) >= READY_WINDOW // STATUS_INTERVAL + 1, (name, monitor.heartbeats[name])
    now = dt.datetime.now(dt.UTC)
    for name in names:
        age = now - _renewed(client, name)
        assert age.total_seconds() < 25, f"lease of {name} renewed {age} ago"
