"""What the chaos tests share: the operator as a process of its own (so it can be SIGKILLed and
SIGSTOPped), a poller of the upgrade that survives an API outage, and the file the measured recovery
times go to (``hack/reliability.py`` turns it into RELIABILITY.md).

``CHAOS_OUTAGE_SECONDS`` sets how long the API server and etcd stay down: ``make test`` uses a short
outage (the invariants are the same), ``make chaos`` the 120 s of issue 22.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client, codecs
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.runtime.leader import LEASE_NAME
from gpu_operator.upgrade import model as m
from tests.conftest import REPO

JSON = dict[str, Any]
OUTAGE_SECONDS = float(os.environ.get("CHAOS_OUTAGE_SECONDS", "5"))
RESULTS = Path(os.environ.get("CHAOS_RESULTS", str(REPO / "build" / "chaos" / "results.json")))
OLD, NEW = "570.124.06", "580.65.06"
#: What a test client may meet while the control plane is down or coming back: API errors, refused
#: connections, timeouts and whatever the HTTP stack raises mid-restart, so any exception.
TRANSIENT = (Exception,)
DRIVER_PODS: dict[str, Any] = {"app.kubernetes.io/component": "nvidia-driver"}


def policy(*, version: str, max_parallel: int = 2) -> JSON:
    """A ClusterPolicy with rolling driver upgrades and only what the driver's readiness chain needs."""
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "driver": {
                "repository": "nvcr.io/nvidia",
                "image": "driver",
                "version": version,
                "env": [{"name": "SIMULATED_MODULE_LOAD_SECONDS", "value": "0.2"}],
                "upgradePolicy": {
                    "autoUpgrade": True,
                    "maxParallelUpgrades": max_parallel,
                    "maxUnavailable": "50%",
                    "podDeletion": {"timeoutSeconds": 120},
                },
            },
            "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": False},
            "gfd": {"enabled": False},
            "nodeStatusExporter": {"enabled": False},
            "migManager": {"enabled": False},
        },
    }


def trainer(namespace: str, *, replicas: int) -> Any:
    """A Deployment of GPU pods: what an upgrade must evict before it replaces a driver."""
    return codecs.from_dict({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {"containers": [{
                    "name": "train", "image": "trainer:test", "command": ["gpu-operator", "agent", "sleep"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }]},
            },
        },
    })  # fmt: skip


def running(client: Client, namespace: str) -> int:
    """The trainer pods running and not terminating."""
    pods = client.list(Pod, namespace=namespace, labels={"app": "trainer"})
    return sum(
        1
        for p in pods
        if p.status and p.status.phase == "Running" and not (p.metadata and p.metadata.deletionTimestamp)
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """``gpu-operator operator`` in a process of its own: started, SIGKILLed, paused and resumed for real."""

    def __init__(
        self, *, kubeconfig: Path, namespace: str, log_dir: Path, name: str = "operator", args: tuple[str, ...] = ()
    ) -> None:
        self.kubeconfig, self.namespace, self.log_dir, self.name = kubeconfig, namespace, log_dir, name
        self.args = args  # more flags of `gpu-operator operator`
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.health_port = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        self.health_port = free_port()
        command = [str(Path(sys.executable).parent / "gpu-operator"), "operator", "--namespace", self.namespace]
        command += ["--metrics-bind-address", f"127.0.0.1:{free_port()}"]
        command += ["--health-probe-bind-address", f"127.0.0.1:{self.health_port}", *self.args]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        log = (self.log_dir / f"{self.name}-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no chance to release the Lease or finish a write."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=30)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on the process's /metrics (served on the probe port too)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def lease(client: Client, namespace: str) -> tuple[str, dt.datetime | None]:
    """The Lease's holder ('' when none) and its last renewal."""
    try:
        obj = client.get(Lease, LEASE_NAME, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return "", None
        raise
    spec = obj.spec
    return (spec.holderIdentity or "", spec.renewTime) if spec else ("", None)


def held_by(client: Client, namespace: str, process: OperatorProcess, *, after: dt.datetime) -> bool:
    """The process holds the Lease and renewed it after ``after``: it is in charge again."""
    holder, renewed = lease(client, namespace)
    return holder.split("-")[-2:-1] == [str(process.pid)] and renewed is not None and renewed > after


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def node_states(client: Client, nodes: list[str]) -> dict[str, str]:
    return {n: (client.get(Node, n).metadata.labels or {}).get(m.STATE_LABEL, "") for n in nodes}  # type: ignore[union-attr]


def wait_states(client: Client, nodes: list[str], *, want: str, timeout: float, describe: str) -> float:
    """Wait until every node is in state ``want``, through API errors; return the seconds it took."""
    begin = time.monotonic()
    wait_for(lambda: set(node_states(client, nodes).values()) == {want}, timeout=timeout, describe=describe,
             retry_on=TRANSIENT)  # fmt: skip
    return time.monotonic() - begin


@dataclass
class UpgradeWatch:
    """Polls nodes and driver pods every 100 ms, through API errors: what a rollout must never do."""

    client: Client
    nodes: list[str]
    namespace: str
    max_in_progress: int = 0
    seen_states: list[str] = field(default_factory=list)
    cordon_flips: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))
    driver_uids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: node -> the states it went through, in order (a state lost on a restart would show as a step back)
    history: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    failed_polls: int = 0
    passes: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UpgradeWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._poll()
            except TRANSIENT:
                self.failed_polls += 1

    def _poll(self) -> None:
        nodes = [n.to_dict() for n in self.client.list(Node) if n.metadata and n.metadata.name in self.nodes]
        for pod in self.client.list(Pod, namespace=self.namespace, labels=DRIVER_PODS):
            if pod.spec and pod.spec.nodeName in self.nodes and pod.metadata and pod.metadata.uid:
                self.driver_uids[pod.spec.nodeName].add(pod.metadata.uid)
        busy = 0
        for node in nodes:
            name = node["metadata"]["name"]
            state = (node["metadata"].get("labels") or {}).get(m.STATE_LABEL, "")
            if state not in self.seen_states:
                self.seen_states.append(state)
            if not self.history[name] or self.history[name][-1] != state:
                self.history[name].append(state)
            busy += state not in m.IDLE_STATES
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            flips = self.cordon_flips[name]
            if not flips or flips[-1] != cordoned:
                flips.append(cordoned)
        self.max_in_progress = max(self.max_in_progress, busy)
        self.passes += 1

    def catch_up(self) -> None:
        target = self.passes + 2
        wait_for(lambda: self.passes >= target, timeout=60, describe="the watcher's next whole poll")


def steps_back(history: list[str]) -> list[tuple[str, str]]:
    """Transitions that go backwards in the upgrade's order (a lost state): none in a sound rollout."""
    order = {state: i for i, state in enumerate(m.STATES)}
    pairs = itertools.pairwise(history)
    return [(a, b) for a, b in pairs if a in order and b in order and order[b] < order[a] and b != m.DONE]


def record(fault: str, **figures: Any) -> None:
    """Add one fault's measured figures to the results file (the last run of a fault wins)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    results: JSON = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    results[fault] = {"outage_seconds": OUTAGE_SECONDS, **figures}
    temporary = RESULTS.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(RESULTS)
    print(f"chaos: {fault}: {figures}")
