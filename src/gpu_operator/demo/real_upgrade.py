"""The real-node demo's driver: the fake driver image as the ClusterPolicy's driver, and its rolling upgrade.

The nodes have fake GPUs and a fake kernel only (``sim.fakedriver.nodes`` shape ``driver-container``);
the chart names the fake driver image (``sim.fakedriver.image``) by repository, image and version, so
the operator's driver DaemonSet installs the driver as it would NVIDIA's. The upgrade step changes
``spec.driver.version`` and prints every node's upgrade state as the controller moves it, with a
workload per node that the upgrade evicts first and that comes back on the new driver.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gpu_operator.agents.discovery.osrelease import os_labels
from gpu_operator.kube.typed import Client, Node, Pod, codecs
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.render.facts import os_tag
from gpu_operator.sim.fakedriver.build import cached_build
from gpu_operator.sim.fakedriver.image import IMAGE, REPOSITORY, DriverImage, build_driver_image
from gpu_operator.upgrade.model import DONE, FAILED, FAILURE_REASON, STATE_LABEL

JSON = dict[str, Any]
OLD_VERSION, NEW_VERSION = "580.95.05", "595.91.07"
#: The driver section of the chart's values: the fake driver image, a startup probe at a demo's pace.
DRIVER_VALUES: JSON = {
    "enabled": True,
    "repository": REPOSITORY,
    "image": IMAGE,
    "version": OLD_VERSION,
    "startupProbe": {"initialDelaySeconds": 2, "periodSeconds": 2, "timeoutSeconds": 30, "failureThreshold": 90},
    # The fake driver image is the operator's image plus the fake installers: our driver agent runs in it.
    "implementation": "agent",
}
SHOW_DRIVER = "echo driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1); sleep 3600"


def driver_image(*, product: Path, checkout: Path) -> DriverImage:
    """The fake driver image of both demo versions, on top of the product image archive."""
    labels = {key: value for key, value in os_labels(Path("/")).items() if value is not None}
    tag = os_tag(labels)
    if not tag:
        raise click.ClickException("/etc/os-release gives no OS tag for the driver image (ID and VERSION_ID)")
    return build_driver_image(base=product, build=cached_build(checkout_root=checkout),
                              versions=(OLD_VERSION, NEW_VERSION), os_tag=tag,
                              output=product.parent / "fake-nvidia-driver.oci.tar")  # fmt: skip


def _workload(*, name: str, node: str, image: str, resource: str) -> JSON:
    container = {"name": "cuda", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", SHOW_DRIVER],
                 "resources": {"limits": {resource: "1"}}}  # fmt: skip
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
            "containers": [container]}  # fmt: skip
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}  # fmt: skip


def _driver_seen(*, cluster: LocalCluster, client: Client, app: str) -> str | None:
    for pod in client.list(Pod, namespace="default", labels={"app": app}):
        if not pod.metadata or pod.metadata.deletionTimestamp or not pod.status or pod.status.phase != "Running":
            continue
        logs = cluster.kubectl("logs", "-n", "default", str(pod.metadata.name), check=False).stdout
        line = next((x for x in logs.splitlines() if x.startswith("driver=")), "")
        return line.removeprefix("driver=") or None
    return None


def run_upgrade(
    *, console: Console, cluster: LocalCluster, client: Client, resources: dict[str, str], image: str
) -> float:
    """One workload per node (asking for one of ``resources[node]``), the version change, each node's
    states; returns the seconds it took."""
    nodes = list(resources)
    apps = {node: f"workload-{node}" for node in nodes}
    for node, app in apps.items():
        client.create(codecs.from_dict(_workload(name=app, node=node, image=image, resource=resources[node])))
    for node, app in apps.items():
        seen = wait_for(functools.partial(_driver_seen, cluster=cluster, client=client, app=app), timeout=120,
                        interval=1.0, describe=f"the workload on {node}")  # fmt: skip
        console.print(f"  {node}: a workload (Deployment {app}, 1 {resources[node]}) runs on driver {seen}")
    console.print(f"  kubectl patch clusterpolicy cluster-policy: spec.driver.version={NEW_VERSION}")
    patch = {"spec": {"driver": {"version": NEW_VERSION}}}
    cluster.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    began = time.monotonic()
    last: dict[str, str] = {}
    while time.monotonic() - began < 480:
        for node in nodes:
            meta = client.get(Node, node).metadata
            labels, annotations = dict(meta.labels or {}), dict(meta.annotations or {})  # type: ignore[union-attr]
            state = labels.get(STATE_LABEL, "")
            if state == FAILED:
                raise click.ClickException(f"{node} upgrade-failed: {annotations.get(FAILURE_REASON, '?')}")
            if last.get(node) != state:
                console.print(f"  {time.monotonic() - began:5.1f} s  {node}: {state or '-'}")
                last[node] = state
        if all(state == DONE for state in last.values()) and len(last) == len(nodes):
            versions = {n: _driver_seen(cluster=cluster, client=client, app=a) for n, a in apps.items()}
            if all(version == NEW_VERSION for version in versions.values()):
                took = time.monotonic() - began
                for node in nodes:
                    console.print(f"  {node}: its workload is back, on driver {NEW_VERSION}")
                return took
        time.sleep(1.0)
    raise click.ClickException("the driver upgrade did not finish in 480 s; see gpu-operator status")
