"""The chart on a real-node cluster: ``helm install`` until the ClusterPolicy is ready, and the operands'
DaemonSets, shared by the e2e tests that install it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet

from gpu_operator.agents.discovery.osrelease import os_labels
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.tools import ToolError
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.render.facts import os_tag
from tests.chart_checks import policy_state
from tests.conftest import REPO

JSON = dict[str, Any]
CHART = REPO / "deploy" / "helm" / "gpu-operator"
NAMESPACE = "gpu-operator"


def host_os_tag() -> str:
    """The real nodes share this machine's /etc: their OS tag, as the discovery agent labels it (what an
    OS-tagged driver image's DaemonSet is named after)."""
    labels = {key: value for key, value in os_labels(Path("/")).items() if value is not None}
    tag = os_tag(labels)
    assert tag, f"this machine's os-release gives no OS tag: {labels}"
    return tag


def install_until_ready(
    cluster: LocalCluster, kube: Client, *, values: JSON, workdir: Path, timeout: float = 240
) -> float:
    """``helm install`` the chart with ``values``; seconds until the ClusterPolicy is ``ready``."""
    path = workdir / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    began = time.monotonic()
    try:
        cluster.helm("install", "gpu-operator", str(CHART), "-n", NAMESPACE, "--create-namespace",
                     "-f", str(path), "--wait", "--timeout", "120s", timeout=150)  # fmt: skip
    except ToolError as error:
        # helm says only "context deadline exceeded": what was not ready is what tells why.
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from error
    wait_for(lambda: policy_state(kube) == "ready", timeout=timeout, describe="the ClusterPolicy ready")
    return time.monotonic() - began


def cluster_state(cluster: LocalCluster) -> str:
    """Every pod and the namespace's latest Events, for the message of a failed install."""
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False)
    events = cluster.kubectl("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp", check=False)
    return f"pods:\n{pods.stdout}{pods.stderr}\nevents in {NAMESPACE}:\n{events.stdout[-4000:]}{events.stderr}"


def daemonsets(kube: Client) -> dict[str, JSON]:
    return {str(d.metadata.name): d.to_dict() for d in kube.list(DaemonSet, namespace=NAMESPACE)}  # type: ignore[union-attr]


def all_ready(kube: Client, *, names: Iterable[str], nodes: int) -> bool:
    """Whether each DaemonSet of ``names`` has a Ready pod on each of ``nodes`` nodes."""
    sets = daemonsets(kube)
    return all((sets.get(name, {}).get("status") or {}).get("numberReady") == nodes for name in names)
