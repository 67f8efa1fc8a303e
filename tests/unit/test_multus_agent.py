"""The multus agent's answers (``service``: delegates from the pod, its NADs and PodResources; the
``network-status`` patch) with a fake API, and the files it installs (``install``)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.multus import install, program, shim
from gpu_operator.agents.multus.service import MultusService
from gpu_operator.gpu.null import NullBackend
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices

JSON = dict[str, Any]
SRIOV = "nvidia.com/sriov_a"


class FakeApi:
    def __init__(self, pods: Mapping[str, JSON], nads: Mapping[str, JSON]) -> None:
        self.pods, self.nads = dict(pods), dict(nads)
        self.patches: list[tuple[str, dict[str, str]]] = []

    async def pod(self, *, namespace: str, name: str) -> JSON | None:
        return self.pods.get(f"{namespace}/{name}")

    async def nad(self, *, namespace: str, name: str) -> JSON | None:
        return self.nads.get(f"{namespace}/{name}")

    async def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.patches.append((f"{namespace}/{name}", dict(annotations)))


def _pod(networks: str | None, uid: str = "u1") -> JSON:
    annotations = {"k8s.v1.cni.cncf.io/networks": networks} if networks is not None else {}
    return {"metadata": {"name": "p", "namespace": "team", "uid": uid, "annotations": annotations}}


def _nad(name: str, kind: str, resource: str = "") -> JSON:
    meta: JSON = {"name": name, "namespace": "team"}
    if resource:
        meta["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": resource}
    return {"metadata": meta, "spec": {"config": json.dumps({"cniVersion": "1.0.0", "type": kind})}}


def _service(tmp_path: Path, api: FakeApi, calls: list[int] | None = None) -> MultusService:
    async def pod_resources() -> Sequence[PodDevices]:
        if calls is not None:
            calls.append(1)
        devices = (ResourceDevices(resource_name=SRIOV, device_ids=("0000:3b:00.2",)),)
        return [PodDevices(namespace="team", name="p", containers=(ContainerDevices(name="c", devices=devices),))]

    return MultusService(api=api, pod_resources=pod_resources, host_path=lambda p: tmp_path / p.lstrip("/"))


def _ask(service: MultusService, **request: Any) -> JSON:
    return asyncio.run(service.handle({"namespace": "team", "name": "p", "uid": "u1", **request}))


def test_delegates_of_a_pod_with_devices_from_pod_resources(tmp_path: Path) -> None:
    api = FakeApi({"team/p": _pod("mv, sr")}, {"team/mv": _nad("mv", "macvlan"), "team/sr": _nad("sr", "sriov", SRIOV)})
    calls: list[int] = []
    answer = _ask(_service(tmp_path, api, calls), op="delegates", cniVersion="1.0.0", ifname="eth0")
    mv, sr = answer["delegates"]
    assert (mv["network"], mv["ifname"], mv["conf"]["type"]) == ("team/mv", "net1", "macvlan")
    assert (sr["ifname"], sr["deviceID"], sr["resource"]) == ("net2", "0000:3b:00.2", SRIOV)
    assert sr["conf"]["deviceID"] == "0000:3b:00.2"
    assert calls == [1]


def test_a_pod_without_networks_gets_none_and_pod_resources_are_not_asked(tmp_path: Path) -> None:
    calls: list[int] = []
    service = _service(tmp_path, FakeApi({"team/p": _pod(None)}, {}), calls)
    assert _ask(service, op="delegates") == {"delegates": []}
    assert calls == []


@pytest.mark.parametrize(
    ("pods", "uid", "message"),
    [
        ({}, "u1", "pod team/p does not exist"),
        ({"team/p": _pod("mv")}, "u2", "pod team/p: the API's pod has UID u1, the runtime's u2 (replaced)"),
        ({"team/p": _pod("gone")}, "u1", "NetworkAttachmentDefinition team/gone does not exist"),
        ({"team/p": _pod("Bad")}, "u1", "annotation k8s.v1.cni.cncf.io/networks: entry 1 ('Bad')"),
        ({"team/p": _pod("mv, sr, sr2")}, "u1", "NetworkAttachmentDefinition team/sr2: annotation"),
    ],
)
def test_errors_are_answered_naming_what_is_wrong(
    tmp_path: Path, pods: dict[str, JSON], uid: str, message: str
) -> None:
    nads = {"team/mv": _nad("mv", "macvlan"), "team/sr": _nad("sr", "sriov", SRIOV),
            "team/sr2": _nad("sr2", "sriov", SRIOV)}  # fmt: skip
    answer = _ask(_service(tmp_path, FakeApi(pods, nads)), op="delegates", uid=uid)
    assert message in answer["error"]


def test_the_report_becomes_network_status_with_device_info(tmp_path: Path) -> None:
    api = FakeApi({}, {})
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:00.2"}}
    devinfo = tmp_path / "var/run/k8s.cni.cncf.io/devinfo/dp" / "nvidia.com-sriov_a-0000:3b:00.2-device.json"
    devinfo.parent.mkdir(parents=True)
    devinfo.write_text(json.dumps(info))
    networks = [
        {"network": "gpuop", "ifname": "eth0", "default": True,
         "result": {"ips": [{"address": "10.244.1.5/24"}], "interfaces": [{"name": "eth0", "sandbox": "/n"}]}},
        {"network": "team/sr", "ifname": "net1", "result": {}, "resource": SRIOV, "deviceID": "0000:3b:00.2"},
    ]  # fmt: skip
    assert _ask(_service(tmp_path, api), op="report", networks=networks) == {}
    ((pod, annotations),) = api.patches
    status = json.loads(annotations["k8s.v1.cni.cncf.io/network-status"])
    assert pod == "team/p"
    assert [(s["name"], s.get("ips"), s.get("device-info")) for s in status] == [
        ("gpuop", ["10.244.1.5"], None), ("team/sr", None, info),
    ]  # fmt: skip


def test_unknown_requests_and_failures_are_answered(tmp_path: Path) -> None:
    class Broken(FakeApi):
        async def pod(self, *, namespace: str, name: str) -> JSON | None:
            raise RuntimeError("API down")

    assert _ask(_service(tmp_path, FakeApi({}, {})), op="dance") == {"error": "unknown op 'dance'"}
    assert _ask(_service(tmp_path, Broken({}, {})), op="delegates") == {"error": "delegates: RuntimeError: API down"}


# -- the node's files ------------------------------------------------------------------------------


def test_the_cluster_network_is_the_first_other_conf(tmp_path: Path) -> None:
    conf_dir = tmp_path / "net.d"
    with pytest.raises(install.ClusterNetworkError, match="no CNI conf besides"):
        install.cluster_network(conf_dir)
    conf_dir.mkdir()
    (conf_dir / install.CONF_NAME).write_text("{}")
    (conf_dir / "20-b.conf").write_text(json.dumps({"name": "b", "type": "bridge"}))
    (conf_dir / "10-a.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "a",
                "plugins": [
                    {"type": "bridge", "capabilities": {"portMappings": True}},
                    {"type": "portmap", "capabilities": {"io": False}},
                ],
            }
        )
    )
    (conf_dir / "05-notes.txt").write_text("not a conf")
    path, cluster = install.cluster_network(conf_dir)
    assert (path.name, cluster["name"]) == ("10-a.conflist", "a")
    conf = install.multus_conf(cluster=cluster, socket="/s.sock", cache_dir="/c")
    assert conf["cniVersion"] == "1.0.0"
    assert conf["name"] == install.NETWORK_NAME
    (plugin,) = conf["plugins"]
    assert (plugin["type"], plugin["socket"], plugin["cacheDir"]) == (shim.TYPE, "/s.sock", "/c")
    assert plugin["capabilities"] == {"portMappings": True}
    assert plugin["clusterNetwork"] == cluster
    (conf_dir / "10-a.conflist").unlink()
    assert install.cluster_network(conf_dir)[1] == {"name": "b", "type": "bridge", "cniVersion": "0.3.1"}
    (conf_dir / "01-broken.json").write_text("{")
    with pytest.raises(install.ClusterNetworkError, match=r"01-broken\.json: cannot read"):
        install.cluster_network(conf_dir)


def test_files_are_replaced_atomically_only_when_changed(tmp_path: Path) -> None:
    bin_dir = tmp_path / "opt/cni/bin"
    assert install.install_shim(bin_dir)
    installed = bin_dir / shim.TYPE
    assert installed.read_bytes() == Path(shim.__file__).read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert not install.install_shim(bin_dir)
    assert [p.name for p in bin_dir.iterdir()] == [shim.TYPE]  # no temporary file left


def test_our_conf_is_removed_only_while_it_is_what_we_wrote(tmp_path: Path) -> None:
    text = install.conf_text({"name": "x"})
    assert install.write_atomic(tmp_path / install.CONF_NAME, text)
    assert not install.remove_conf(tmp_path, written=b"something else")
    assert install.remove_conf(tmp_path, written=text)
    assert not install.remove_conf(tmp_path, written=text)


# -- the agent's loop (program) --------------------------------------------------------------------


class Context:
    """An AgentContext with the node under ``root/host``, stopping after ``rounds`` resyncs."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None, rounds: int = 1) -> None:
        self.root, self.node_name, self.env = root, "node-1", dict(env or {})
        self.plugin_dir, self.gpu, self.node = root / "plugins", NullBackend(), None
        self.rounds = rounds
        self.readiness: list[bool] = []

    def path(self, container_path: str) -> Path:
        return self.root / "container" / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / "host" / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.readiness.append(ready)

    async def sleep(self, seconds: float | None) -> bool:
        self.rounds -= 1
        return self.rounds <= 0


def _node(tmp_path: Path, *, python3: str | None = "/usr/bin/python3") -> Context:
    ctx = Context(tmp_path)
    conf_dir = ctx.host_path(program.CNI_CONF_DIR)
    conf_dir.mkdir(parents=True)
    (conf_dir / "10-bridge.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "bridge", "plugins": [{"type": "bridge"}]})
    )
    if python3:
        _python3(ctx, python3)
    return ctx


def _python3(ctx: Context, node_path: str) -> None:
    path = ctx.host_path(node_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/nonexistent/python3.12")  # an absolute link is a node path: not followed


def _sync(ctx: Context, written: bytes | None = None) -> tuple[bool, bytes | None]:
    return program.sync(ctx, conf_dir=ctx.host_path(program.CNI_CONF_DIR), timeout=60.0, written=written)


def test_without_python3_on_the_node_no_conf_is_written_until_there_is_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = _node(tmp_path, python3=None)
    ours = ctx.host_path(program.CNI_CONF_DIR) / install.CONF_NAME
    ours.write_text("{}")  # left by an earlier agent: every pod's ADD would fail with it
    with caplog.at_level(logging.ERROR):
        assert _sync(ctx) == (False, None)
    assert not ours.exists()
    assert not ctx.host_path(program.CNI_BIN_DIR).exists()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "the node has no python3 for the CNI shim" in message
    assert all(str(ctx.host_path(p)) in message for p in program.PYTHON3_PATHS)
    _python3(ctx, "/usr/local/bin/python3")
    ready, written = _sync(ctx)
    assert ready
    assert written == ours.read_bytes()
    assert (ctx.host_path(program.CNI_BIN_DIR) / shim.TYPE).exists()
    # python3 gone again (the node's image changed): our conf goes, the agent is not ready.
    ctx.host_path("/usr/local/bin/python3").unlink()
    assert _sync(ctx, written) == (False, None)
    assert not ours.exists()


def test_a_failed_write_is_logged_not_ready_and_retried_by_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = _node(tmp_path)
    ctx.rounds = 3
    real = install.write_atomic
    failures = [OSError(30, "Read-only file system"), OSError(28, "No space left on device")]

    def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
        if failures:
            raise failures.pop(0)
        return real(path, data, mode=mode)

    async def start_server(service: object, *, socket_path: Path) -> FakeServer:
        return FakeServer()

    monkeypatch.setattr(install, "write_atomic", write_atomic)
    monkeypatch.setattr(program, "start_server", start_server)
    with caplog.at_level(logging.ERROR):
        asyncio.run(program.main(ctx, api=FakeApi({}, {})))
    # Two resyncs fail (an OSError each): logged, not ready; the third installs the shim and the conf.
    assert ctx.readiness == [False, False, True, False]
    assert ["Read-only file system" in r.getMessage() or "No space left" in r.getMessage()
            for r in caplog.records] == [True, True]  # fmt: skip
    assert not (ctx.host_path(program.CNI_CONF_DIR) / install.CONF_NAME).exists()  # removed at the stop


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MULTUS_RESYNC_SECONDS": "10s"}, "MULTUS_RESYNC_SECONDS: not a number of seconds: '10s'"),
        ({"MULTUS_RESYNC_SECONDS": "0"}, "MULTUS_RESYNC_SECONDS: must be a positive number of seconds"),
        ({"MULTUS_SHIM_TIMEOUT_SECONDS": "nan"}, "MULTUS_SHIM_TIMEOUT_SECONDS: must be a positive number"),
        ({"MULTUS_SHIM_TIMEOUT_SECONDS": "one minute"}, "MULTUS_SHIM_TIMEOUT_SECONDS: not a number of seconds"),
    ],
)
def test_bad_env_values_are_an_error_at_start_naming_the_variable(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    ctx = Context(tmp_path, env=env)
    with pytest.raises(ValueError, match=re.escape(message)):
        asyncio.run(program.main(ctx, api=FakeApi({}, {})))
    assert ctx.readiness == []
    assert (
        program.env_seconds(Context(tmp_path, env={"MULTUS_RESYNC_SECONDS": " 2.5"}), "MULTUS_RESYNC_SECONDS", 10)
        == 2.5
    )


class FakeServer:
    def close(self) -> None:
        return None

    async def wait_closed(self) -> None:
        return None
