"""A bad config after a good one, on a real node: the device plugin and the MIG manager keep the good one.

One real node (a 2-GPU A100 host with the fake driver, MIG-capable), the chart installed with the plugin
config and the MIG config in ConfigMaps of our own (``spec.devicePlugin.config``, ``spec.migManager.config``),
as an administrator sets them; the ConfigMaps are then edited in place, and the kubelet brings each edit
into the running pods' volumes (at its periodic pod sync: up to about a minute and a half). Two kinds of
bad input each: a count past its bound, and a byte that is not UTF-8 (a ``binaryData`` key: input
Python's UTF-8 reader raises on, which the agents did not catch before they refused such input).

- Device plugin: time-slicing in 4 replicas shows 8 ``nvidia.com/gpu`` allocatable; each bad edit (100000
  replicas, past the bound of 1024; then a 0xff byte) brings a ``ConfigRefused`` Event on the Node naming
  the file and the field, while the same plugin container (never restarted, never registered again) keeps
  the 8 allocatable and counts each refusal on its metrics; a good edit (2 replicas) is then applied by
  that same container.
- MIG manager: ``all-1g.5gb`` applied (state ``success``, 14 MIG devices allocatable under the single
  strategy); each bad edit, then a label asking for a config (``all-2g.10gb`` asking for 100000 devices
  per GPU; then ``all-disabled`` from a file with a 0xff byte): the state becomes ``failed`` with the
  one-line reason on the Node and in a ``MigConfigFailed`` Event, the GPUs keep their 14 MIG devices (the
  fake driver's MIG state unchanged) and neither the MIG manager nor the device plugin was restarted; the
  good config back and ``all-2g.10gb`` asked for again, the same MIG manager applies it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.types import PatchType

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.keys import MIG_CONFIG_REASON
from gpu_operator.render import mig, operands
from gpu_operator.sim.fakedriver.install import FakeDriver
from gpu_operator.sim.fakedriver.nodes import attach, node_setup
from gpu_operator.sim.hardware import pci_functions
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import allocatable
from tests.e2e.installs import NAMESPACE, install_until_ready

JSON = dict[str, Any]
NODE = "real-node-1"
PROFILE = "a100-mig"
METRICS_PORT = 9402
PLUGIN_APP = "nvidia-device-plugin-daemonset"
MIG_APP = "nvidia-mig-manager"
PLUGIN_CONFIGS = "plugin-configs"
MIG_CONFIGS = "mig-configs"
MIG_FILE = f"{mig.CONFIG_DIR}/config.yaml"  # where the MIG manager's pod reads the ConfigMap's key
#: The kubelet refreshes a ConfigMap volume at its pod sync (syncFrequency, a minute by default, plus
#: jitter). This module's node syncs every SYNC_S: each edit here waits on that, and the test is about
#: what the agents do with the file, not how soon the kubelet delivers it.
SYNC_S = 10
#: What an edit may take to reach a running pod: a few syncs, the agent's own pass, a loaded machine.
VOLUME_SYNC_S = 6 * SYNC_S


def _sharing(replicas: int) -> str:
    rule = f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    return "version: v1\nsharing:\n  timeSlicing:\n    resources:\n" + rule


def _mig_configs(*, two_g_count: int) -> str:
    layouts = {"all-disabled": "mig-enabled: false", "all-1g.5gb": "mig-enabled: true\n      mig-devices: {1g.5gb: 7}"}
    layouts["all-2g.10gb"] = f"mig-enabled: true\n      mig-devices: {{2g.10gb: {two_g_count}}}"
    body = "".join(f"  {name}:\n    - devices: all\n      {entry}\n" for name, entry in layouts.items())
    return "version: v1\nmig-configs:\n" + body


GOOD_MIG = _mig_configs(two_g_count=3)
#: 100000 devices per GPU: past the bound of 64, refused before any plan is built.
BAD_MIG = _mig_configs(two_g_count=100000)
#: A byte that is not UTF-8 (say, a file saved in Latin-1) at the end of a good config.
NOT_UTF8_TAIL = b"# \xff\n"


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage
) -> Iterator[LocalCluster]:
    local = LocalCluster(
        binaries=kube_binaries,
        real_nodes=1,
        node_images=[product_image.archive],
        node_binaries=node_binaries,
        node_hardware=[pci_functions(PROFILE)],
        node_setups=[dataclasses.replace(node_setup(profile=PROFILE), sync_frequency_s=SYNC_S)],
    )
    with local:
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[Client]:
    client = cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def driver(cluster: LocalCluster) -> FakeDriver:
    assert cluster.real_nodes is not None
    return attach(cluster.real_nodes.node(NODE), profile=PROFILE)


@pytest.fixture(scope="module")
def installed(cluster: LocalCluster, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> float:
    """The chart with the plugin config (``shared``: 4 replicas; ``plain``: no sharing) and the MIG
    layouts in our own ConfigMaps, created first as an administrator would."""
    kube.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
    plugin_data = {"shared": _sharing(4), "plain": "version: v1\n"}
    for name, data in ((PLUGIN_CONFIGS, plugin_data), (MIG_CONFIGS, {"config.yaml": GOOD_MIG})):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}
        kube.create(codecs.from_dict({**body, "data": data}))
    values = {
        "driver": {"enabled": False},
        "dcgmExporter": {"enabled": False},  # not what this module is about: less for the machine to run
        "devicePlugin": {
            "config": {"name": PLUGIN_CONFIGS, "default": "shared"},
            "env": [{"name": "DP_METRICS_LISTEN", "value": f":{METRICS_PORT}"}],
        },
        "migManager": {"config": {"name": MIG_CONFIGS, "default": "all-disabled"}},
    }
    seconds = install_until_ready(cluster, kube, values=values, workdir=tmp_path_factory.mktemp("values"))
    print(f"helm install to ClusterPolicy ready on one fake-driver node: {seconds:.1f} s")
    return seconds


def _pod(kube: Client, app: str) -> JSON:
    """The node's pod of the DaemonSet ``app``, once its container runs."""

    def running() -> JSON | None:
        pods = [p.to_dict() for p in kube.list(Pod, namespace=NAMESPACE, labels={"app": app})]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        statuses = [s for p in live for s in (p.get("status") or {}).get("containerStatuses") or []]
        return live[0] if len(live) == 1 and statuses and all("running" in s["state"] for s in statuses) else None

    return wait_for(running, timeout=120, describe=f"the {app} pod running")


def _container(kube: Client, name: str) -> tuple[str, int]:
    """The pod's (first) container: its ID and restart count."""
    status = kube.get(Pod, name, namespace=NAMESPACE).to_dict()["status"]["containerStatuses"][0]
    return str(status.get("containerID")), int(status["restartCount"])


def _node_events(kube: Client, reason: str) -> list[str]:
    return [
        str(e.message)
        for e in kube.list(Event, namespace="default", fields={"reason": reason})
        if e.involvedObject.kind == "Node" and e.involvedObject.name == NODE
    ]


def _exec(cluster: LocalCluster, pod: str, *command: str) -> str:
    return cluster.kubectl("exec", "-n", NAMESPACE, pod, "--", *command, check=False).stdout


def _metrics(cluster: LocalCluster, pod: str) -> str:
    fetch = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/metrics').read().decode())"
    return _exec(cluster, pod, "python3", "-c", fetch)


def _registrations(cluster: LocalCluster, pod: str) -> int:
    """How often the plugin has registered with the kubelet (its log says so each time)."""
    logs = cluster.kubectl("logs", "-n", NAMESPACE, pod, check=False).stdout
    return sum(1 for line in logs.splitlines() if ": registered " in line)


def _edit(kube: Client, name: str, key: str, content: str | bytes) -> None:
    """Replace the key of the ConfigMap ``name`` in place: text in ``data``, bytes that are not text in
    ``binaryData`` (a key is in one of the two, never both)."""
    if isinstance(content, str):
        patch: JSON = {"data": {key: content}, "binaryData": {key: None}}
    else:
        patch = {"data": {key: None}, "binaryData": {key: base64.b64encode(content).decode()}}
    kube.patch(ConfigMap, name, patch, namespace=NAMESPACE, patch_type=PatchType.MERGE)


def _mounted(cluster: LocalCluster, pod: str, path: str, content: str | bytes) -> bool:
    """Whether the pod reads ``content`` at ``path`` (the kubelet synced its ConfigMap volume)."""
    raw = content.encode() if isinstance(content, str) else content
    return _exec(cluster, pod, "sha256sum", path).split()[:1] == [hashlib.sha256(raw).hexdigest()]


def _labels(kube: Client) -> dict[str, str]:
    return dict(kube.get(Node, NODE).metadata.labels or {})  # type: ignore[union-attr]


def _annotations(kube: Client) -> dict[str, str]:
    return dict(kube.get(Node, NODE).metadata.annotations or {})  # type: ignore[union-attr]


FAILURES = "gpu_operator_device_plugin_config_reload_failures_total"


@pytest.mark.timeout(900)  # the module's cluster and chart install come first
def test_a_bad_plugin_config_is_refused_and_the_good_one_keeps_serving(
    cluster: LocalCluster, kube: Client, installed: float
) -> None:
    wait_for(lambda: allocatable(kube, NODE) == "8", timeout=120, describe="2 GPUs x 4 replicas allocatable")
    plugin = str(_pod(kube, PLUGIN_APP)["metadata"]["name"])
    container = _container(kube, plugin)
    registrations = _registrations(cluster, plugin)
    assert registrations >= 1
    assert f"{FAILURES} 0\n" in _metrics(cluster, plugin)
    path = f"{operands.CONFIG_DIR}/shared"
    bad: list[tuple[str | bytes, str]] = [
        (
            _sharing(100000),
            f"{path}: sharing.timeSlicing.resources.0.replicas: must be from 2 to 1024 (replicas per GPU), got 100000",
        ),
        (_sharing(4).encode() + NOT_UTF8_TAIL, f"{path}: not UTF-8 text (byte {len(_sharing(4)) + 2} is 0xff)"),
    ]
    for count, (content, words) in enumerate(bad, start=1):
        began = time.monotonic()
        _edit(kube, PLUGIN_CONFIGS, "shared", content)
        refused = wait_for(
            lambda: next((m for m in _node_events(kube, "ConfigRefused") if words in m), None),  # noqa: B023
            timeout=VOLUME_SYNC_S,
            describe=f"a ConfigRefused Event on the Node saying {words!r}",
        )
        print(f"bad plugin config {count} edited to ConfigRefused Event: {time.monotonic() - began:.1f} s")
        assert refused == f"device-plugin[{NODE}]: {words}; keeping the last good config"
        # Each bad version is counted once (the plugin re-reads the file every second: the same error
        # again is no new one).
        assert f"{FAILURES} {count}\n" in _metrics(cluster, plugin)
        # The good config still serves: the same container, not restarted, its resources never
        # registered again (a registration is how a changed device list reaches the kubelet), the same
        # allocatable.
        assert _container(kube, plugin) == container
        assert _registrations(cluster, plugin) == registrations
        assert allocatable(kube, NODE) == "8"

    began = time.monotonic()
    _edit(kube, PLUGIN_CONFIGS, "shared", _sharing(2))
    wait_for(lambda: allocatable(kube, NODE) == "4", timeout=VOLUME_SYNC_S, describe="2 GPUs x 2 replicas allocatable")
    print(f"good plugin config edited to 4 allocatable: {time.monotonic() - began:.1f} s")
    wait_for(lambda: _node_events(kube, "ConfigAccepted"), timeout=30, describe="a ConfigAccepted Event on the Node")
    assert _container(kube, plugin) == container  # the same plugin reloaded it: alive, never restarted
    assert _registrations(cluster, plugin) == registrations + 1
    assert f"{FAILURES} {len(bad)}\n" in _metrics(cluster, plugin)


def _geometry(driver: FakeDriver) -> list[str]:
    """The fake driver's MIG state on the node: each GPU's mode, GPU instances and MIG devices (UUIDs)."""
    state = driver.config.parent / "fake-nvml.mig"
    return sorted(state.read_text(encoding="utf-8").splitlines()) if state.exists() else []


def _mig_devices(geometry: list[str]) -> list[str]:
    return [line.split()[-1] for line in geometry if line.startswith("ci ")]


def _mig_state(kube: Client) -> str:
    return _labels(kube).get("nvidia.com/mig.config.state", "")


@pytest.mark.timeout(720)
def test_a_bad_mig_config_fails_the_run_and_the_gpus_keep_their_geometry(
    cluster: LocalCluster, kube: Client, installed: float, driver: FakeDriver
) -> None:
    # The plugin without sharing (by the node's label: read at once), so its count is the MIG devices'.
    cluster.kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=plain", "--overwrite")
    _ask(cluster, "all-1g.5gb")
    wait_for(lambda: _mig_state(kube) == "success" and allocatable(kube, NODE) == "14", timeout=300, interval=1.0,
             describe="all-1g.5gb applied and its 14 MIG devices allocatable")  # fmt: skip
    good = _geometry(driver)
    assert len(_mig_devices(good)) == 14
    manager = str(_pod(kube, MIG_APP)["metadata"]["name"])
    plugin = str(_pod(kube, PLUGIN_APP)["metadata"]["name"])
    containers = {manager: _container(kube, manager), plugin: _container(kube, plugin)}

    bad: list[tuple[str | bytes, str, str]] = [
        (BAD_MIG, "all-2g.10gb", "mig-configs.all-2g.10gb[0]: mig-devices.2g.10gb: the count must be a whole "
         "number from 0 to 64 (MIG devices per GPU), got 100000"),
        (GOOD_MIG.encode() + NOT_UTF8_TAIL, "all-disabled", f"not UTF-8 text (byte {len(GOOD_MIG) + 2} is 0xff)"),
    ]  # fmt: skip
    for content, wanted, words in bad:
        began = time.monotonic()
        _edit(kube, MIG_CONFIGS, "config.yaml", content)
        # Asked for only once the pod reads the bad file: asked for earlier, the good file would apply it.
        wait_for(lambda: _mounted(cluster, manager, MIG_FILE, content), timeout=VOLUME_SYNC_S, interval=2.0,  # noqa: B023
                 describe="the edited MIG config in the MIG manager's pod")  # fmt: skip
        synced = time.monotonic()
        _ask(cluster, wanted)
        # The reason says which run ended (the state is already failed after the first bad one); the
        # manager writes it just before the state.
        reason = f"{MIG_FILE}: {words}"
        wait_for(lambda: _annotations(kube).get(MIG_CONFIG_REASON) == reason and _mig_state(kube) == "failed",  # noqa: B023
                 timeout=60, describe=f"the MIG config {wanted} failed with its reason")  # fmt: skip
        failed = time.monotonic()
        print(f"bad MIG config for {wanted} edited to mounted: {synced - began:.1f} s; "
              f"label to failed: {failed - synced:.1f} s")  # fmt: skip
        wait_for(lambda: reason in _node_events(kube, "MigConfigFailed"), timeout=30,  # noqa: B023
                 describe="a MigConfigFailed Event with the reason")  # fmt: skip
        # Nothing was applied: the same 14 MIG devices, still served; no agent restarted or replaced.
        assert _geometry(driver) == good
        assert allocatable(kube, NODE) == "14"
        assert {name: _container(kube, name) for name in containers} == containers
        assert str(_pod(kube, MIG_APP)["metadata"]["name"]) == manager

    # The same MIG manager applies a good config again once it is there and asked for.
    _edit(kube, MIG_CONFIGS, "config.yaml", GOOD_MIG)
    wait_for(lambda: _mounted(cluster, manager, MIG_FILE, GOOD_MIG), timeout=VOLUME_SYNC_S, interval=2.0,
             describe="the good MIG config back in the MIG manager's pod")  # fmt: skip
    _ask(cluster, "all-2g.10gb")
    wait_for(lambda: _mig_state(kube) == "success" and allocatable(kube, NODE) == "6", timeout=300, interval=1.0,
             describe="all-2g.10gb applied and its 6 MIG devices allocatable")  # fmt: skip
    assert len(_mig_devices(_geometry(driver))) == 6
    assert MIG_CONFIG_REASON not in _annotations(kube)
    assert _container(kube, manager) == containers[manager]


def _ask(cluster: LocalCluster, config: str) -> None:
    """Ask the node's MIG manager for ``config`` (the label a user sets)."""
    cluster.kubectl("label", "node", NODE, f"nvidia.com/mig.config={config}", "--overwrite")
