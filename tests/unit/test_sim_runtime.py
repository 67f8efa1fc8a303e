"""One pod's lifecycle in the simulated kubelet, against a fake API and node (no cluster, no sleeping: the
test waits for the status reports it expects)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kube.restclient import ApiClient
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.sim.kubelet.devices import DeviceManager
from gpu_operator.sim.kubelet.gpuplugin import SimGpuPlugin
from gpu_operator.sim.kubelet.host import RuntimeOptions
from gpu_operator.sim.kubelet.runtime import PodWorker
from gpu_operator.sim.programs.programs import ProgramRegistry, default_registry

JSON = dict[str, Any]
FAST = RuntimeOptions(restart_backoff=0.0, restart_backoff_max=0.0, grace_cap=1.0)


class FakeApi:
    """Records pod status patches and deletions; ``until`` awaits a status matching a predicate."""

    def __init__(self) -> None:
        self.statuses: list[JSON] = []
        self.deleted: list[str] = []
        self._changed = asyncio.Condition()

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> JSON:
        async with self._changed:
            self.statuses.append(body["status"])
            self._changed.notify_all()
        return {}

    async def delete(self, path: str, *, grace_seconds: int | None = None, uid: str | None = None) -> None:
        self.deleted.append(path)

    async def until(self, predicate: Any) -> JSON:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: any(predicate(s) for s in self.statuses)), 10)
        return next(s for s in self.statuses if predicate(s))


class FakeHost:
    def __init__(self, root: Path, gpu: GpuBackend) -> None:
        self.name = "n1"
        self.host_ip = "172.16.0.1"
        self.host_root = root
        self.dirs = KubeletDirs(root=root)
        self.gpu = gpu
        self.fake_api = FakeApi()
        self.api = cast(ApiClient, self.fake_api)
        self.registry: ProgramRegistry = default_registry()
        self.api_server = "https://127.0.0.1:6443"

        async def ignore(capacity: Any) -> None:
            return None

        self.devices = DeviceManager(node_name="n1", dirs=self.dirs, on_capacity=ignore, serve=False)

    def pod_ip(self, uid: str, *, host_network: bool) -> str:
        return self.host_ip if host_network else "10.64.0.1"

    def release_pod_ip(self, uid: str) -> None:
        return None

    def service_env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1"}


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _pod(*containers: JSON, init: tuple[JSON, ...] = (), policy: str = "Always") -> JSON:
    spec = {"nodeName": "n1", "restartPolicy": policy, "containers": list(containers), "initContainers": list(init)}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}


def _container(name: str, *argv: str, **extra: Any) -> JSON:
    return {"name": name, "image": "img", "command": ["gpu-operator", "agent", *argv], **extra}


def _app(status: JSON, index: int = 0) -> JSON:
    result: JSON = status["containerStatuses"][index]
    return result


def _scenario(root: Path, pod: JSON, until: Any, *, gpu: GpuBackend | None = None, plugin: bool = False) -> JSON:
    async def run() -> JSON:
        host = FakeHost(root, gpu or NullBackend())
        if plugin:
            await host.devices.attach_local(SimGpuPlugin(backend=host.gpu))
        worker = PodWorker(host=host, pod=pod, options=FAST)
        worker.start()
        status = await host.fake_api.until(until)
        await worker.terminate(delete=True)
        assert host.fake_api.deleted == ["/api/v1/namespaces/ns/pods/p"]
        return status

    return asyncio.run(run())


def test_init_then_app_running_and_ready(root: Path) -> None:
    pod = _pod(_container("app", "sleep"), init=(_container("init", "sleep", "0"),))
    status = _scenario(root, pod, lambda s: s["phase"] == "Running" and _app(s)["ready"])
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


def test_failing_container_restarts_with_always(root: Path) -> None:
    status = _scenario(root, _pod(_container("app", "fail", "3")), lambda s: _app(s)["restartCount"] >= 2)
    assert _app(status)["lastState"]["terminated"]["exitCode"] == 3


def test_never_policy_ends_failed(root: Path) -> None:
    status = _scenario(root, _pod(_container("app", "fail", "2"), policy="Never"), lambda s: s["phase"] == "Failed")
    assert _app(status)["state"]["terminated"]["exitCode"] == 2


def test_unknown_program_waits_with_reason(root: Path) -> None:
    pod = _pod({"name": "web", "image": "nginx", "command": ["nginx"]})
    status = _scenario(
        root, pod, lambda s: "waiting" in _app(s)["state"] and _app(s)["state"]["waiting"]["reason"] == "UnknownProgram"
    )
    assert "'nginx' is not a simulated program" in _app(status)["state"]["waiting"]["message"]
    assert status["phase"] == "Pending"


def test_readiness_probe_waits_for_the_program(root: Path) -> None:
    pod = _pod(_container("app", "sleep", readinessProbe={"exec": {"command": ["true"]}}))
    status = _scenario(root, pod, lambda s: s["phase"] == "Running")
    assert _app(status)["ready"] is False  # `sleep` never calls set_ready


def test_device_admission(root: Path) -> None:
    gpu = SimulatedBackend(profile=node_profile("pcie-t4"), node_name="n1")
    greedy = _pod(_container("app", "sleep", resources={"limits": {"nvidia.com/gpu": "3"}}))
    status = _scenario(root, greedy, lambda s: s["phase"] == "Failed", gpu=gpu, plugin=True)
    assert status["reason"] == "UnexpectedAdmissionError"
    assert "Requested: 3, Available: 2" in status["message"]


def _conditions(status: JSON) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_status_marked_not_ready_by_the_node_lifecycle_controller_is_written_back(root: Path) -> None:
    """MarkPodsNotReady sets Ready=False on a running pod; the kubelet's status manager writes Ready=True back
    (once), but leaves a pod that is being deleted alone."""

    async def run() -> None:
        host = FakeHost(root, NullBackend())
        worker = PodWorker(host=host, pod=_pod(_container("app", "sleep")), options=FAST)
        worker.start()
        api = host.fake_api
        ours = await api.until(lambda s: _conditions(s)["Ready"] == "True")
        await asyncio.sleep(0)
        written = len(api.statuses)
        marked = dict(
            ours, conditions=[dict(c, status="False") if c["type"] == "Ready" else c for c in ours["conditions"]]
        )
        worker.update({**worker.pod, "status": marked})
        async with api._changed:
            await asyncio.wait_for(api._changed.wait_for(lambda: len(api.statuses) > written), 10)
        assert len(api.statuses) == written + 1
        assert _conditions(api.statuses[-1])["Ready"] == "True"
        worker.update({**worker.pod, "status": api.statuses[-1]})  # the write-back's own echo: nothing more
        deleting = {**worker.pod, "metadata": {**worker.pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
        worker.update({**deleting, "status": marked})
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(api.statuses) == written + 1
        await worker.terminate(delete=True)

    asyncio.run(run())
