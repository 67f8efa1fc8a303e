"""The multus agent and its shim over the real unix socket: ``gpu-operator agent multus`` runs with a
node under tmp_path (a fake API, the kubelet's PodResources served by our gRPC server), installs the
shim and its conf, and the installed shim, executed as the runtime would (a process, env and stdin),
gets the pod's delegates over the socket, runs a fake plugin for each, and reports back: the pod's
``network-status`` says what it got, ``deviceID`` included. Stopped, the agent removes its conf."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.multus import program
from gpu_operator.agents.multus.install import CONF_NAME
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices
from gpu_operator.kubelet.podresources import PodResourcesServer

JSON = dict[str, Any]
SRIOV = "nvidia.com/sriov_a"
PLUGIN = """#!{python}
import json, os, sys
conf = json.load(sys.stdin)
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps({{"cniVersion": conf["cniVersion"], "ips": [{{"address": conf["ip"], "interface": 0}}],
                      "interfaces": [{{"name": os.environ["CNI_IFNAME"], "sandbox": os.environ["CNI_NETNS"],
                                      "mac": conf.get("deviceID", "none")}}]}}))
"""


@dataclass
class Node:
    root: Path
    env: dict[str, str] = field(default_factory=lambda: {"MULTUS_RESYNC_SECONDS": "0.05"})
    node_name: str = "n1"
    node: Any = None
    ready: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def plugin_dir(self) -> Path:
        return self.root / "var/lib/kubelet/device-plugins"

    @property
    def gpu(self) -> Any:
        return None

    def path(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.ready = ready

    async def sleep(self, seconds: float | None) -> bool:
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True


class Api:
    def __init__(self) -> None:
        self.patches: list[dict[str, str]] = []

    async def pod(self, *, namespace: str, name: str) -> JSON | None:
        annotations = {"k8s.v1.cni.cncf.io/networks": "mv, sr@fast0"}
        return {"metadata": {"name": name, "namespace": namespace, "uid": "u1", "annotations": annotations}}

    async def nad(self, *, namespace: str, name: str) -> JSON | None:
        config = {"cniVersion": "1.0.0", "type": "fake", "ip": "192.0.2.10/24" if name == "mv" else "198.51.100.7/24"}
        annotations = {"k8s.v1.cni.cncf.io/resourceName": SRIOV} if name == "sr" else {}
        return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations},
                "spec": {"config": json.dumps(config)}}  # fmt: skip

    async def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.patches.append(dict(annotations))


class Assigned:
    def pod_devices(self) -> Sequence[PodDevices]:
        devices = (ResourceDevices(resource_name=SRIOV, device_ids=("0000:3b:00.2",)),)
        return [PodDevices(namespace="team", name="p", containers=(ContainerDevices(name="c", devices=devices),))]

    def allocatable_devices(self) -> Sequence[ResourceDevices]:
        return []


async def _shim(node: Node, command: str, plugins: Path) -> tuple[int, str]:
    conf = json.loads(node.host_path(f"/etc/cni/net.d/{CONF_NAME}").read_text())
    plugin = conf["plugins"][0]
    # The shim runs on this machine: the node paths of its conf, as they are here.
    plugin["socket"] = str(node.host_path(plugin["socket"]))
    plugin["cacheDir"] = str(node.host_path(plugin["cacheDir"]))
    stdin = {**{k: v for k, v in conf.items() if k != "plugins"}, **plugin}
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "eth0",
           "CNI_PATH": str(plugins), "CNI_ARGS": "K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;K8S_POD_UID=u1",
           "PATH": os.environ["PATH"]}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        str(node.host_path("/opt/cni/bin/gpu-operator-multus")), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await process.communicate(json.dumps(stdin).encode())
    return process.returncode or 0, out.decode()


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A short directory: the kubelet's socket path under it must fit a unix socket address."""
    root = Path(tempfile.mkdtemp(prefix="mx-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_installed_shim_gets_delegates_over_the_socket_and_reports(tmp_path: Path, short_root: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fake").write_text(PLUGIN.format(python=sys.executable))
    (plugins / "fake").chmod(0o755)
    node = Node(root=short_root)
    # The shim runs on the node under its python3: the agent installs nothing on a node without one.
    node.host_path("/usr/bin").mkdir(parents=True)
    node.host_path("/usr/bin/python3").symlink_to(sys.executable)
    conf_dir = node.host_path("/etc/cni/net.d")
    conf_dir.mkdir(parents=True)
    (conf_dir / "10-pods.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "fake", "ip": "10.244.1.5/24"}]}))  # fmt: skip
    api = Api()

    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        kubelet = PodResourcesServer(socket=node.host_path("/var/lib/kubelet/pod-resources/kubelet.sock"),
                                     source=Assigned())  # fmt: skip
        await kubelet.start()
        agent = asyncio.create_task(program.main(node, api=api))
        try:
            for _ in range(200):
                if node.ready:
                    break
                await asyncio.sleep(0.05)
            assert node.ready
            added = await _shim(node, "ADD", plugins)
            deleted = await _shim(node, "DEL", plugins)
        finally:
            node.stop.set()
            await asyncio.wait_for(agent, timeout=10)
            await kubelet.stop()
        return added, deleted

    (code, out), (del_code, _) = asyncio.run(scenario())
    assert code == 0, out
    assert json.loads(out)["ips"] == [{"address": "10.244.1.5/24", "interface": 0}]
    (patch,) = api.patches
    status = json.loads(patch["k8s.v1.cni.cncf.io/network-status"])
    assert [(s["name"], s["interface"], s["ips"]) for s in status] == [
        ("pods", "eth0", ["10.244.1.5"]), ("team/mv", "net1", ["192.0.2.10"]), ("team/sr", "fast0", ["198.51.100.7"]),
    ]  # fmt: skip
    assert [s["mac"] for s in status] == ["none", "none", "0000:3b:00.2"]  # the device PodResources gave the pod
    assert del_code == 0
    assert not node.host_path("/var/lib/cni/gpu-operator/cache/c1").exists()
    assert not (conf_dir / CONF_NAME).exists()  # removed when the agent stopped
    assert node.host_path("/opt/cni/bin/gpu-operator-multus").is_file()  # the shim stays
    assert not node.ready
