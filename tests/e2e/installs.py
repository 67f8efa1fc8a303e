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

from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from tests.chart_checks import policy_state
from tests.conftest import REPO

JSON = dict[str, Any]
CHART = REPO / "deploy" / "helm" / "gpu-operator"
NAMESPACE = "gpu-operator"


def install_until_ready(
    cluster: LocalCluster, kube: Client, *, values: JSON, workdir: Path, timeout: float = 240
) -> float:
    """``helm install`` the chart with ``values``; seconds until the ClusterPolicy is ``ready``."""
    path = workdir / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    began = time.monotonic()
    cluster.helm("install", "gpu-operator", str(CHART), "-n", NAMESPACE, "--create-namespace",
                 "-f", str(path), "--wait", "--timeout", "120s", timeout=150)  # fmt: skip
    wait_for(lambda: policy_state(kube) == "ready", timeout=timeout, describe="the ClusterPolicy ready")
    return time.monotonic() - began


def daemonsets(kube: Client) -> dict[str, JSON]:
    return {str(d.metadata.name): d.to_dict() for d in kube.list(DaemonSet, namespace=NAMESPACE)}  # type: ignore[union-attr]


def all_ready(kube: Client, *, names: Iterable[str], nodes: int) -> bool:
    """Whether each DaemonSet of ``names`` has a Ready pod on each of ``nodes`` nodes."""
    sets = daemonsets(kube)
    return all((sets.get(name, {}).get("status") or {}).get("numberReady") == nodes for name in names)
