"""GPU workloads on the real-node clusters of the e2e tests: a pod that shows what it was given, and reading it.

The pod lists its ``/dev`` on the first line of its log, runs the fake ``nvidia-smi -L`` (which the
driver's files, mounted by CDI or the runtime, bring into it) and prints ``driver=<version>``, then
sleeps, so a test can read what the container really got and the pod stays to be evicted or deleted.
(The operator's image, which the pods run, has coreutils but no grep.)
"""

from __future__ import annotations

from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Node

from gpu_operator.localcluster.cluster import LocalCluster

JSON = dict[str, Any]
SHOW = (
    "ls /dev | tr '\\n' ' '; echo; nvidia-smi -L; "
    "echo driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1); sleep 3600"
)


def gpu_pod(name: str, *, node: str, image: str, gpus: int = 0, runtime_class: str | None = None,
            env: dict[str, str] | None = None) -> JSON:  # fmt: skip
    container: JSON = {
        "name": "cuda",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SHOW],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: JSON = {"nodeName": node, "restartPolicy": "Never", "containers": [container]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def gpu_deployment(name: str, *, node: str, image: str, gpus: int) -> JSON:
    """One replica of :func:`gpu_pod` kept on ``node`` by a Deployment: a workload an upgrade may evict
    (a bare pod it may not), that comes back once the node is schedulable again."""
    pod = gpu_pod(name, node=node, image=image, gpus=gpus)
    spec = pod["spec"]
    del spec["nodeName"]  # through the scheduler, which keeps it off the node while it is cordoned
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec["restartPolicy"] = "Always"
    spec["terminationGracePeriodSeconds"] = 1
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}}  # fmt: skip


def pod_log(cluster: LocalCluster, name: str) -> list[str]:
    return cluster.kubectl("logs", "-n", "default", name, check=False).stdout.splitlines()


def seen_gpus(cluster: LocalCluster, name: str) -> tuple[set[str], list[str]] | None:
    """The pod's ``/dev/nvidia<N>`` nodes and the UUIDs its ``nvidia-smi -L`` lists (None: not yet)."""
    logs = pod_log(cluster, name)
    if len(logs) < 2 or not any(line.startswith("GPU ") for line in logs):
        return None
    devices = {d for d in logs[0].split() if d.startswith("nvidia") and d.removeprefix("nvidia").isdigit()}
    uuids = [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in logs[1:] if line.startswith("GPU ")]
    return devices, uuids


def driver_version_seen(cluster: LocalCluster, name: str) -> str | None:
    """The driver version the pod's ``nvidia-smi`` reported (None: not yet, or it reported none)."""
    line = next((line for line in pod_log(cluster, name) if line.startswith("driver=")), "")
    return line.removeprefix("driver=").strip() or None


def allocatable(kube: Client, node: str) -> str | None:
    status = kube.get(Node, node).status
    return (status.allocatable or {}).get("nvidia.com/gpu") if status else None
