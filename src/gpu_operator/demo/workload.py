"""The demo's workload, exporter and MIG steps on the simulated nodes.

* :class:`WorkloadRecorder` is the program the sample pod's container runs (``gpu-operator agent
  demo-workload``): it records the GPUs the device plugin's Allocate gave it (``NVIDIA_VISIBLE_DEVICES``,
  or the CDI device names when the policy enables CDI, as the default policy does).
* :func:`exporter_lines` reads the node's exporter over HTTP, on the loopback address the simulator gives
  its pod (the pod IP mirrored into 127.0.0.0/8) and port 9400.
* :func:`switch_mig` labels a node with a mig-parted config name and follows ``nvidia.com/mig.config.state``
  until the MIG manager reports success and the device plugin advertises the new resources.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console

from gpu_operator.agents.deviceplugin.response import VISIBLE
from gpu_operator.agents.migmanager.reconfigure import CONFIG_LABEL, STATE_LABEL
from gpu_operator.demo.progress import gpu_resources, operand_pods
from gpu_operator.kube.typed import ApiError, Client, Node, Pod, codecs
from gpu_operator.kubelet.allocation import ContainerAllocation
from gpu_operator.localcluster.health import FETCH_ERRORS, fetch_text
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.kubelet.volumes import loopback_for
from gpu_operator.sim.programs.context import ProgramContext

JSON = dict[str, Any]
WORKLOAD_PROGRAM = "demo-workload"
WORKLOAD_NAMESPACE = "default"
WORKLOAD_POD = "cuda-vectoradd"
EXPORTER_DAEMONSET = "nvidia-dcgm-exporter"
EXPORTER_PORT = 9400
UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"


@dataclass(frozen=True, kw_only=True)
class Granted:
    """What the device plugin's Allocate gave one container: how the runtime is told, and which GPUs."""

    how: str  # e.g. "NVIDIA_VISIBLE_DEVICES=GPU-...,GPU-..." or "CDI devices k8s.device-plugin.nvidia.com/gpu=..."
    uuids: tuple[str, ...]


def granted(devices: Sequence[ContainerAllocation]) -> Granted:
    """The GPUs of a container's allocations, read the way the container runtime would."""
    visible = ",".join(v for d in devices if (v := d.envs.get(VISIBLE)))
    if visible.startswith("GPU-"):
        return Granted(how=f"{VISIBLE}={visible}", uuids=tuple(visible.split(",")))
    cdi = [name for d in devices for name in d.cdi_devices]
    if cdi:
        return Granted(how=f"CDI devices {', '.join(cdi)}", uuids=tuple(n.split("=", 1)[1] for n in cdi))
    ids = tuple(i for d in devices for i in d.device_ids)
    return Granted(how=f"device IDs {', '.join(ids)}", uuids=ids)


class WorkloadRecorder:
    """Records the GPUs each run of the workload program was given (``program`` is the entrypoint)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._granted: dict[str, Granted] = {}
        self._allocations: dict[str, list[ContainerAllocation]] = {}

    async def program(self, ctx: ProgramContext) -> None:
        got = granted(ctx.devices)
        with self._lock:
            self._granted[ctx.pod_name] = got
            self._allocations[ctx.pod_name] = list(ctx.devices)
        ctx.log.info("%s got %s", ctx.pod_name, got.how)
        await ctx.stopped()

    def granted(self, pod: str) -> Granted | None:
        with self._lock:
            return self._granted.get(pod)

    def allocations(self, pod: str) -> list[ContainerAllocation] | None:
        """Every resource's Allocate answer for the pod's container (None before it ran)."""
        with self._lock:
            return self._allocations.get(pod)


def workload_pod(*, node: str, gpus: int) -> Any:
    """A pod asking for ``gpus`` GPUs on ``node``, running the recorder program."""
    return codecs.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": WORKLOAD_POD, "namespace": WORKLOAD_NAMESPACE, "labels": {"app": WORKLOAD_POD}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "cuda",
                        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "command": ["gpu-operator", "agent", WORKLOAD_PROGRAM],
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        }
    )


def run_workload(*, client: Client, recorder: WorkloadRecorder, node: str, gpus: int, timeout: float = 60.0) -> Granted:
    """Create the workload pod, wait for it to run; returns the GPUs it was given."""
    client.create(workload_pod(node=node, gpus=gpus))

    def running() -> Granted | None:
        pod: JSON = client.get(Pod, WORKLOAD_POD, namespace=WORKLOAD_NAMESPACE).to_dict()
        if (pod.get("status") or {}).get("phase") != "Running":
            return None
        return recorder.granted(WORKLOAD_POD)

    return wait_for(running, timeout=timeout, describe=f"pod {WORKLOAD_NAMESPACE}/{WORKLOAD_POD} running")


def exporter_url(*, client: Client, namespace: str, node: str) -> str:
    """The /metrics URL of the exporter pod on ``node`` (its own loopback address, port 9400)."""
    pod = operand_pods(client=client, namespace=namespace).get((EXPORTER_DAEMONSET, node))
    ip = ((pod or {}).get("status") or {}).get("podIP")
    if not ip:
        raise click.ClickException(f"no running exporter pod with an IP on {node}")
    return f"http://{loopback_for(ip)}:{EXPORTER_PORT}/metrics"


def exporter_lines(*, url: str, metric: str = UTIL_METRIC) -> list[str]:
    text = fetch_text(url)
    return [line for line in text.splitlines() if line.startswith(metric + "{")]


def wait_busy_lines(*, url: str, uuids: list[str], pod: str, timeout: float = 45.0) -> list[str]:
    """The utilisation lines once every GPU in ``uuids`` shows load and the pod's label."""

    def busy() -> list[str] | None:
        lines = exporter_lines(url=url)
        hits = [
            line
            for line in lines
            # The value as a number: the exporter prints 0.000000, which no "ends with 0" test catches.
            if any(u in line for u in uuids) and f'pod="{pod}"' in line and float(line.rsplit(" ", 1)[1]) > 0
        ]
        return lines if len(hits) == len(uuids) else None

    return wait_for(
        busy, timeout=timeout, interval=1.0, describe=f"exporter shows load on {uuids}", retry_on=FETCH_ERRORS
    )


def switch_mig(
    *, console: Console, client: Client, node: str, config: str, resource: str, timeout: float = 120.0
) -> str:
    """Label ``node`` with ``config``; print each state change; returns the node's GPU resources at the end."""
    meta = client.get(Node, node).metadata
    before = (meta.labels if meta is not None else None) or {}
    console.print(f"  now: {CONFIG_LABEL}={before.get(CONFIG_LABEL)}, {STATE_LABEL}={before.get(STATE_LABEL)}")
    client.patch(Node, node, {"metadata": {"labels": {CONFIG_LABEL: config}}})
    console.print(f"  labelled {node} {CONFIG_LABEL}={config}")
    begin = time.monotonic()
    last: str | None = None
    while time.monotonic() - begin < timeout:
        try:
            obj: JSON = client.get(Node, node).to_dict()
        except ApiError:
            obj = {"metadata": {}}
        state = (obj["metadata"].get("labels") or {}).get(STATE_LABEL, "(unset)")
        resources = gpu_resources(obj)
        if state != last:
            console.print(f"  {time.monotonic() - begin:5.1f} s  {STATE_LABEL}={state}")
            last = state
        if state == "failed" and last is not None and time.monotonic() - begin > 2.0:
            raise click.ClickException(f"the MIG manager failed to apply {config} on {node}")
        if state == "success" and resource in resources:
            shown = ", ".join(f"{k}={v}" for k, v in resources.items())
            console.print(f"  {time.monotonic() - begin:5.1f} s  allocatable: {shown}")
            return shown
        time.sleep(0.5)
    raise click.ClickException(
        f"{node}: {STATE_LABEL}={last} and no {resource} after {timeout:.0f} s (allocatable: {gpu_resources(obj)})"
    )
