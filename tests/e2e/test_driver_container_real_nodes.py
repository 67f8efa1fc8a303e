"""The driver container on two real nodes: the operator installs the fake driver, then upgrades it.

real-node-1 (8 H100s) and real-node-2 (2 A100s) have fake GPUs and nothing of a driver: a PCI tree,
the description of their GPUs (``sim.fakedriver.container.HARDWARE``) and a fake kernel whose
``/sys/module`` is their own. The ClusterPolicy names the fake driver image (``sim.fakedriver.image``:
the operator's image with the fake driver's ``.run`` installers and module tools) by repository,
image and version, tagged by the OS that the discovery agent labels without NFD.

``helm install`` brings the policy to ``ready`` with the driver DaemonSet's pods real containers: the
driver manager finds no module loaded, the driver agent runs the image's installer, "loads" the modules
and exposes its root at ``/run/nvidia/driver``, where the toolkit, validator and plugin find the
driver. A pod then gets its GPUs through CDI from that root and sees the installed version. Changing
``driver.version`` upgrades the nodes one at a time (upgrade controller: cordon, evict the GPU pods,
restart the driver pod; driver manager: unload; driver agent: install the new version) until both
are ``upgrade-done``; each node's workload (a Deployment's pod) is evicted before its old driver pod
goes, and comes back on the new version. While the first node waits for its workload to go, its
kubelet and containerd restart (issue 22's fault): the evicted pod must still go, and the upgrade
finish without a failed node; the figures go to the chaos results (RELIABILITY.md). Last, a canary
rollout (issue 21) of a driver that fails validation: it installs and loads on real-node-1, the canary,
but leaves no CUDA library, so the validator's CUDA check fails there; the rollout halts at the
canary's timeout with the canary in validation and rolls it back to the last good driver, and
real-node-2 keeps its driver pod and is never cordoned. Then a good driver through the canary's real gates: the
validator, the exporter Ready, and a probe Job whose GPU's nvidia-smi must answer on the canary; only
then does real-node-2 start.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Node, Pod

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.sim.fakedriver.build import cached_build
from gpu_operator.sim.fakedriver.image import IMAGE, REPOSITORY, DriverImage, build_driver_image, reference
from gpu_operator.sim.fakedriver.nodes import Shape, attach, node_setup
from gpu_operator.sim.hardware import pci_functions
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import STATE_LABEL
from tests.chaos.harness import record
from tests.chart_checks import policy_state
from tests.conftest import REPO
from tests.e2e.conftest import ProductImage
from tests.e2e.gpu_pods import allocatable, driver_version_seen, gpu_deployment, gpu_pod, pod_log, seen_gpus
from tests.e2e.installs import NAMESPACE, all_ready, host_os_tag, install_until_ready

JSON = dict[str, Any]
PROFILES = {"real-node-1": "dgx-h100", "real-node-2": "a100-mig"}
GPUS = {"real-node-1": 8, "real-node-2": 2}
OLD, NEW = "580.95.05", "595.91.07"
#: A driver that installs and loads but leaves no CUDA library: only the validator's CUDA check fails.
BAD = "590.48.01"
SHAPE: Shape = "driver-container"
#: The node whose kubelet and containerd restart while it waits for its workload to go (it goes first).
RESTARTED = "real-node-1"
#: The evicted workload gone this soon after the restart: the kubelet's restart (1 s here; systemd's
#: RestartSec is 10 s on a host) and the pod's 30 s grace period, with room for a loaded machine.
RESTART_ALLOWANCE = 60.0


# An OS-tagged driver image: one DaemonSet per OS tag of the GPU nodes (both nodes share this machine's).
DRIVER_DAEMONSET = f"nvidia-driver-daemonset-{host_os_tag()}"
OPERANDS = {
    DRIVER_DAEMONSET, "nvidia-gpu-discovery", "nvidia-container-toolkit-daemonset", "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-mig-manager",
}  # fmt: skip


@pytest.fixture(scope="module")
def driver_image(product_image: ProductImage) -> DriverImage:
    output = REPO / "build" / "image" / "fake-nvidia-driver.oci.tar"
    return build_driver_image(base=product_image.archive, build=cached_build(checkout_root=REPO),
                              versions=(OLD, NEW, BAD), broken=(BAD,), os_tag=host_os_tag(),
                              output=output)  # fmt: skip


@pytest.fixture(scope="module")
def driver_cluster(
    kube_binaries: KubeBinaries, node_binaries: NodeBinaries, product_image: ProductImage, driver_image: DriverImage
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        binaries=kube_binaries,
        real_nodes=len(PROFILES),
        node_images=[product_image.archive, driver_image.archive],
        node_binaries=node_binaries,
        node_hardware=[pci_functions(p) for p in PROFILES.values()],
        node_setups=[node_setup(profile=p, shape=SHAPE) for p in PROFILES.values()],
    )
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def kube(driver_cluster: LocalCluster) -> Iterator[Client]:
    client = driver_cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def installed(driver_cluster: LocalCluster, kube: Client, tmp_path_factory: pytest.TempPathFactory) -> float:
    """``helm install`` naming the fake driver image; seconds until the policy is ready."""
    # The startup probe at a test's pace (the chart's 60 s initial delay suits a real driver build).
    probe = {"initialDelaySeconds": 2, "periodSeconds": 2, "timeoutSeconds": 30, "failureThreshold": 90}
    # The fake driver image is the operator's image plus the fake installers: our driver agent runs in it.
    driver = {"enabled": True, "repository": REPOSITORY, "image": IMAGE, "version": OLD, "startupProbe": probe,
              "implementation": "agent"}  # fmt: skip
    # A window open every minute, in a zone the image must resolve (it has no /usr/share/zoneinfo: the
    # tzdata wheel): the upgrade below runs only because the operator in the image reads it.
    windows = {"timeZone": "Europe/Berlin", "windows": [{"schedule": "* * * * *", "duration": "1m"}]}
    seconds = install_until_ready(driver_cluster, kube, values={"driver": driver, "maintenanceWindows": windows},
                                  timeout=300, workdir=tmp_path_factory.mktemp("values"))  # fmt: skip
    print(f"helm install to ClusterPolicy ready, driver installed by the driver container: {seconds:.1f} s")
    return seconds


def _restart_kubelet_and_containerd(cluster: LocalCluster) -> None:
    """The kubelet, then containerd at once: the new kubelet may start while containerd is down (it then
    exits and the node's watcher starts it again, as systemd would)."""
    assert cluster.real_nodes is not None
    node = cluster.real_nodes.node(RESTARTED)
    node.restart_kubelet()
    node.restart_containerd()


def _all_ready(kube: Client) -> bool:
    return all_ready(kube, names=OPERANDS, nodes=len(PROFILES))


def _driver_pods(kube: Client) -> dict[str, JSON]:
    """node -> its driver pod."""
    pods = kube.list(Pod, namespace=NAMESPACE, labels={"app": DRIVER_DAEMONSET})
    # A DaemonSet's new pod is briefly unbound (the scheduler binds it): it is no node's yet.
    return {str(p.spec.nodeName): p.to_dict() for p in pods if p.spec and p.spec.nodeName}


def _has_gpus(kube: Client, node: str) -> bool:
    return allocatable(kube, node) == str(GPUS[node])


def _pod_ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _failing_check(cluster: LocalCluster, kube: Client, node: str, container: str, words: str) -> list[str]:
    """What ``container``, an init container of the validator pod on ``node``, says of its failing check:
    its log lines naming ``words`` while it retries (the validator waits for a check to pass), or how it
    exited. Empty while it has not failed."""
    pods = kube.list(Pod, namespace=NAMESPACE, labels={"app": "nvidia-operator-validator"},
                     fields={"spec.nodeName": node})  # fmt: skip
    out = []
    for pod in pods:
        for status in (pod.to_dict().get("status") or {}).get("initContainerStatuses") or []:
            if status["name"] != container:
                continue
            state, last = status.get("state") or {}, status.get("lastState") or {}
            ended = state.get("terminated") or last.get("terminated") or {}
            if ended.get("exitCode", 0) != 0:
                out.append(f"{container} exited {ended['exitCode']}: {ended.get('message') or ended.get('reason')}")
            elif "running" in state:
                name = pod.metadata.name if pod.metadata else ""
                logs = cluster.kubectl("logs", "-n", NAMESPACE, str(name), "-c", container, check=False).stdout
                out += [line for line in logs.splitlines() if words in line]
    return out


def _labels(kube: Client, node: str) -> dict[str, str]:
    return dict(kube.get(Node, node).metadata.labels or {})  # type: ignore[union-attr]


@pytest.mark.timeout(480)  # the first test pays for the cluster's start and the install (up to 300 s)
def test_the_driver_container_installs_the_fake_driver_and_every_operand_runs(
    driver_cluster: LocalCluster, kube: Client, installed: float, driver_image: DriverImage
) -> None:
    wait_for(lambda: _all_ready(kube), timeout=60, describe="every operand Ready on both nodes")
    assert driver_cluster.real_nodes is not None
    # The MIG manager in the image read the rendered maintenance windows (a bad value fails the config) and,
    # the window open, applied the MIG-capable node's default config.
    wait_for(lambda: _labels(kube, "real-node-2").get("nvidia.com/mig.config.state") == "success", timeout=120,
             describe="real-node-2's MIG config applied inside the window")  # fmt: skip
    for node, pod in _driver_pods(kube).items():
        assert pod["spec"]["containers"][0]["image"] == reference(version=OLD, os_tag=host_os_tag())
        labels = _labels(kube, node)
        assert labels["nvidia.com/gpu.deploy.driver"] == "true"  # not "pre-installed": nothing on the host
        assert labels["nvidia.com/gpu-discovery.os-release.ID"]  # the tag's OS, without NFD
        wait_for(functools.partial(_has_gpus, kube, node), timeout=30, describe=f"{node}'s GPUs allocatable")
        real = driver_cluster.real_nodes.node(node)
        assert real.view("/sys/module/nvidia/refcnt").exists()  # loaded into the node's fake kernel
        driver = attach(real, profile=PROFILES[node], shape=SHAPE, version=OLD)
        assert driver.library.is_file()  # the container's root, exposed at /run/nvidia/driver
    assert not Path("/sys/module/nvidia").exists()  # the machine's own kernel never had it


@pytest.mark.timeout(240)
def test_a_gpu_pod_gets_its_gpus_from_the_driver_containers_root(
    driver_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    assert driver_cluster.real_nodes is not None
    driver = attach(driver_cluster.real_nodes.node("real-node-1"), profile="dgx-h100", shape=SHAPE, version=OLD)
    kube.create(codecs.from_dict(gpu_pod("dc-two", node="real-node-1", image=product_image.reference, gpus=2)))
    devices, uuids = wait_for(lambda: seen_gpus(driver_cluster, "dc-two"), timeout=90, describe="the pod's GPUs")
    assert len(set(uuids)) == 2
    assert set(uuids) <= set(driver.uuids)
    expected = {f"nvidia{driver.minors[driver.uuids.index(u)]}" for u in uuids}
    assert devices == expected, pod_log(driver_cluster, "dc-two")
    seen = wait_for(functools.partial(driver_version_seen, driver_cluster, "dc-two"), timeout=30,
                    describe="the driver version the pod's nvidia-smi reports")  # fmt: skip
    assert seen == OLD
    kube.delete(Pod, "dc-two", namespace="default", grace_period=0)


def _workload_pod(kube: Client, app: str) -> tuple[str, str] | None:
    """(name, uid) of the running pod of Deployment ``app``."""
    for pod in kube.list(Pod, namespace="default", labels={"app": app}):
        if pod.status and pod.status.phase == "Running" and pod.metadata and not pod.metadata.deletionTimestamp:
            return str(pod.metadata.name), str(pod.metadata.uid)
    return None


def _gone(kube: Client, name: str, namespace: str, uid: str) -> bool:
    try:
        pod = kube.get(Pod, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return True
        raise
    return str(pod.metadata.uid) != uid  # type: ignore[union-attr]


@pytest.mark.timeout(600)
def test_a_driver_upgrade_evicts_the_workload_first_and_ends_upgrade_done(
    driver_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    apps = {node: f"workload-{node}" for node in PROFILES}
    for node, app in apps.items():
        kube.create(codecs.from_dict(gpu_deployment(app, node=node, image=product_image.reference, gpus=1)))
    pods = {node: wait_for(functools.partial(_workload_pod, kube, app), timeout=90, describe=f"{app} running")
            for node, app in apps.items()}  # fmt: skip
    for node, (name, _) in pods.items():
        seen = wait_for(functools.partial(driver_version_seen, driver_cluster, name), timeout=60,
                        describe=f"{name} on the old driver")  # fmt: skip
        assert seen == OLD, node
    old_drivers = {n: (p["metadata"]["name"], p["metadata"]["uid"]) for n, p in _driver_pods(kube).items()}

    began = time.monotonic()
    driver_cluster.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge",
                           "-p", f'{{"spec": {{"driver": {{"version": "{NEW}"}}}}}}')  # fmt: skip
    workload_gone: dict[str, float] = {}
    driver_gone: dict[str, float] = {}
    restarted: dict[str, tuple[str, float]] = {}  # node -> (its state, seconds since the patch)

    def upgraded() -> bool:
        now = time.monotonic() - began
        state = _labels(kube, RESTARTED).get(STATE_LABEL, "")
        if not restarted and state in (m.WAIT_FOR_JOBS, m.POD_DELETION):
            _restart_kubelet_and_containerd(driver_cluster)
            restarted[RESTARTED] = (state, time.monotonic() - began)
        for node in PROFILES:
            if node not in workload_gone and _gone(kube, pods[node][0], "default", pods[node][1]):
                workload_gone[node] = now
            name, uid = old_drivers[node]
            if node not in driver_gone and _gone(kube, name, NAMESPACE, uid):
                driver_gone[node] = now
        states = {n: _labels(kube, n).get(STATE_LABEL) for n in PROFILES}
        assert "upgrade-failed" not in states.values(), {n: _labels(kube, n) for n in PROFILES}
        done = all(state == "upgrade-done" for state in states.values())
        return done and len(driver_gone) == len(PROFILES) and policy_state(kube) == "ready"

    wait_for(upgraded, timeout=300, interval=0.5, describe="both nodes upgrade-done on the new driver")
    print(f"driver upgrade {OLD} -> {NEW} on 2 nodes: {time.monotonic() - began:.1f} s; workload evicted at "
          f"{workload_gone}, old driver pod gone at {driver_gone}")  # fmt: skip
    assert restarted, "the first node was never seen waiting for its workload to go"
    state, at = restarted[RESTARTED]
    real = driver_cluster.real_nodes.node(RESTARTED)  # type: ignore[union-attr]
    gone_after = max(0.0, workload_gone[RESTARTED] - at)
    record("kubelet and containerd restarted on a real node mid-upgrade", restarted_in=state,
           workload_gone_after_restart_s=round(gone_after, 2), kubelet_started_again_by_watcher=real.kubelet_restarts,
           upgrade_s=round(time.monotonic() - began, 1), nodes=len(PROFILES),
           allowance_s=RESTART_ALLOWANCE)  # fmt: skip
    assert gone_after <= RESTART_ALLOWANCE, f"the evicted workload went {gone_after:.1f} s after the restart"
    for node in PROFILES:
        assert workload_gone[node] <= driver_gone[node], f"{node}: the driver went before its workload"
        node_obj = kube.get(Node, node)
        assert not (node_obj.spec and node_obj.spec.unschedulable), f"{node} left cordoned"
    for pod in _driver_pods(kube).values():
        assert pod["spec"]["containers"][0]["image"] == reference(version=NEW, os_tag=host_os_tag())
    # Each workload is back on its node, on the new driver.
    for node, app in apps.items():
        name, _ = wait_for(functools.partial(_workload_pod, kube, app), timeout=90, describe=f"{app} back")
        seen = wait_for(functools.partial(driver_version_seen, driver_cluster, name), timeout=60,
                        describe=f"{name} on the new driver")  # fmt: skip
        assert seen == NEW, node


#: The canary stage of the e2e: one canary (real-node-1, first by name), and 45 s to run the new driver.
CANARY = {"nodes": 1, "soakSeconds": 5, "timeoutSeconds": 45}
#: The bad driver's canary stage never times out in this test: the halt must come from the validator's
#: CUDA check giving up on the bad driver (a definite failure, seconds after the driver runs), not from a
#: timeout that only a slow machine would reach first.
BAD_TIMEOUT = 3600


def _rollout(kube: Client) -> dict[str, str]:
    try:
        return dict(kube.get(ConfigMap, keys.DRIVER_ROLLOUT_CONFIGMAP, namespace=NAMESPACE).data or {})
    except ApiError:
        return {}


@pytest.mark.timeout(900)
def test_a_driver_that_fails_on_its_canary_rolls_back_and_the_other_node_never_changes(
    driver_cluster: LocalCluster, kube: Client, installed: float
) -> None:
    """Issue 21: a driver failing validation reaches only its canary, which returns to the last good driver."""
    canary, other = "real-node-1", "real-node-2"

    def settled() -> bool:
        states = {_labels(kube, n).get(STATE_LABEL) for n in PROFILES}
        return states == {m.DONE} and policy_state(kube) == "ready"

    wait_for(settled, timeout=180, describe="both nodes upgrade-done and the policy ready")

    def running_good() -> str | None:
        # The controller records the last good driver on the pass after the nodes settle: until then the
        # rollout may still name the driver before the last upgrade.
        version = json.loads(_rollout(kube).get("goodDriver") or "{}").get("version")
        images = {p["spec"]["containers"][0]["image"] for p in _driver_pods(kube).values()}
        return version if version and images == {reference(version=version, os_tag=host_os_tag())} else None

    good = wait_for(running_good, timeout=120, describe="the running driver kept as the last good one")
    before = {n: (p["metadata"]["uid"], p["spec"]["containers"][0]["image"]) for n, p in _driver_pods(kube).items()}
    assert before[canary][1] == before[other][1] == reference(version=good, os_tag=host_os_tag())
    began = time.monotonic()
    canary_stage = {**CANARY, "timeoutSeconds": BAD_TIMEOUT}
    patch = {"spec": {"driver": {"version": BAD, "upgradePolicy": {"canary": canary_stage}}}}
    driver_cluster.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    seen: dict[str, set[str]] = {n: set() for n in PROFILES}
    uids: dict[str, set[str]] = {n: set() for n in PROFILES}
    cordoned: set[str] = set()
    phases: list[str] = []
    bad_driver_ready: list[str] = []  # the canary's driver pod of the bad driver, once Ready (it installed)
    validation_failed: list[str] = []  # what the canary's validator said while the bad driver ran

    def rolled_back() -> bool:
        for node in PROFILES:
            obj = kube.get(Node, node)
            seen[node].add((obj.metadata.labels or {}).get(STATE_LABEL, ""))  # type: ignore[union-attr]
            if obj.spec and obj.spec.unschedulable:
                cordoned.add(node)
        for node, pod in _driver_pods(kube).items():
            uids[node].add(pod["metadata"]["uid"])
            bad = pod["spec"]["containers"][0]["image"] == reference(version=BAD, os_tag=host_os_tag())
            if node == canary and bad and _pod_ready(pod) and not bad_driver_ready:
                bad_driver_ready.append(pod["metadata"]["name"])
        if bad_driver_ready and not validation_failed:
            validation_failed.extend(_failing_check(driver_cluster, kube, canary, "cuda-validation", "libcuda"))
        phase = _rollout(kube).get("phase", "")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        state = _labels(kube, canary).get(STATE_LABEL)
        return phase == "rolled-back" and state == m.DONE and policy_state(kube) == "ready"

    wait_for(rolled_back, timeout=300, interval=0.5, describe="the canary rolled back to the last good driver")
    took = time.monotonic() - began
    rollout = _rollout(kube)
    print(f"canary rollout of a bad driver: halted and rolled back in {took:.1f} s; phases {phases}; "
          f"reason: {rollout['reason']}")  # fmt: skip
    assert phases[-3:] == ["canary", "rolling-back", "rolled-back"], phases
    assert rollout["canaries"] == canary
    # The bad driver installed and ran on the canary: it failed in validation, not before.
    assert bad_driver_ready, "the bad driver's pod never became Ready on the canary"
    assert validation_failed, "the canary's validator never failed its CUDA check"
    print(f"the canary's validator on driver {BAD}: {validation_failed[0]}")
    # Halted by the validator's answer on the canary, not by the stage's timeout.
    assert rollout["reason"].startswith(f"canary {canary}: validator pod nvidia-operator-validator-"), rollout["reason"]
    assert (
        "failed on this driver: cuda-validation exited 1: agent validator: cuda validation failed "
        in (rollout["reason"])
    )
    after = {n: (p["metadata"]["uid"], p["spec"]["containers"][0]["image"]) for n, p in _driver_pods(kube).items()}
    # The canary: its driver replaced by the bad one, then by the good one again; uncordoned.
    assert after[canary][1] == before[canary][1]
    assert len(uids[canary]) >= 2
    assert after[canary][0] != before[canary][0]
    assert not kube.get(Node, canary).spec.unschedulable  # type: ignore[union-attr]
    # The other node: the same driver pod all along, never cordoned, never past upgrade-required.
    assert after[other] == before[other]
    assert uids[other] == {before[other][0]}
    assert other not in cordoned
    assert seen[other] <= {m.DONE, m.REQUIRED}, seen[other]
    policy = driver_cluster.kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout
    status = json.loads(policy)["status"]["driverUpgrade"]["canary"]
    assert status["phase"] == "rolled-back"
    assert status["goodVersion"] == good
    assert status["targetVersion"] == BAD


#: The probe of the passing canary: the fake nvidia-smi, through the GPU the Job is given, must answer.
PROBE = "nvidia-smi -L && nvidia-smi --query-gpu=driver_version --format=csv,noheader"


@pytest.mark.timeout(600)
def test_a_good_driver_passes_its_canarys_real_gates_and_reaches_every_node(
    driver_cluster: LocalCluster, kube: Client, installed: float, product_image: ProductImage
) -> None:
    """Issue 21: the canary's gates on real nodes (validator, exporter Ready, a probe Job on its GPU), then all."""
    canary, other = "real-node-1", "real-node-2"
    wait_for(lambda: policy_state(kube) == "ready", timeout=180, describe="the policy ready")
    current = {n: p["spec"]["containers"][0]["image"] for n, p in _driver_pods(kube).items()}
    target = OLD if set(current.values()) == {reference(version=NEW, os_tag=host_os_tag())} else NEW
    probe = {"image": product_image.reference, "imagePullPolicy": "Never", "command": ["sh", "-c", PROBE],
             "gpus": 1, "timeoutSeconds": 120}  # fmt: skip
    gates = {"noNewXids": True, "exporterReady": True, "probe": probe}
    patch = {"spec": {"driver": {"version": target, "upgradePolicy": {"canary": {**CANARY, "timeoutSeconds": 240,
                                                                                 "gates": gates}}}}}  # fmt: skip
    began = time.monotonic()
    driver_cluster.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    phases: list[str] = []
    other_started_in: list[str] = []  # the canary's phase when the other node first left upgrade-done

    def completed() -> bool:
        rollout = _rollout(kube)
        phase = rollout.get("phase", "")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        if not other_started_in and _labels(kube, other).get(STATE_LABEL) not in (m.DONE, m.REQUIRED):
            other_started_in.append(phase)
        images = {p["spec"]["containers"][0]["image"] for p in _driver_pods(kube).values()}
        done = {_labels(kube, n).get(STATE_LABEL) for n in PROFILES} == {m.DONE}
        return (
            phase == ""
            and rollout.get("goodVersion") == target
            and done
            and images == {reference(version=target, os_tag=host_os_tag())}
        )

    wait_for(completed, timeout=300, interval=0.5, describe=f"driver {target} on both nodes through the canary")
    print(f"canary rollout of a good driver ({target}): {time.monotonic() - began:.1f} s; phases {phases}")
    assert phases[1:4] == ["canary", "soaking", "proceeding"], phases
    assert other_started_in == ["proceeding"]  # the other node waited for the canary to pass
    jobs = driver_cluster.kubectl("get", "jobs", "-n", NAMESPACE, "-l", keys.CANARY_PROBE_LABEL, "-o", "json").stdout
    probes = json.loads(jobs)["items"]
    assert [j["spec"]["template"]["spec"]["nodeName"] for j in probes] == [canary]
    assert probes[0]["status"].get("succeeded") == 1
    logs = driver_cluster.kubectl("logs", "-n", NAMESPACE, f"job/{probes[0]['metadata']['name']}").stdout
    assert target in logs  # the probe's GPU answered on the canary's new driver
