"""Pod attribution: which container holds which GPU, from the kubelet's PodResources v1 ``List``.

Considered resources: ``nvidia.com/gpu``, every ``nvidia.com/mig-*`` and the extra names of
``NVIDIA_RESOURCE_NAMES``. A device id is keyed as itself, as the part before ``::`` (shared
replicas ``<uuid>::<n>``) or before ``/vgpu`` (GKE), and a MIG device UUID also as
``<gpu index>-<GPU instance id>``, the key of a MIG series (see ``render.entity_key``).

The mapping is refreshed once per collection with a timeout, never per scrape: dcgm-exporter's
synchronous per-scrape lookup is what made scrapes time out on busy MIG nodes (NVIDIA/dcgm-exporter
#599). A missing socket switches attribution off until it appears; a failed call keeps the previous
mapping (pods rarely change within one interval, and dropping the labels would split every series).

Pod labels and UIDs (``DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS`` / ``..._POD_UID``) are not in
PodResources: they come from the API server, one ``list`` of this node's pods per collection (the
exporter's service account may read pods only when one of the two is on), kept when a list fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from gpu_operator.agents.exporter.render import PodRef
from gpu_operator.agents.shared.cluster import PodInfo
from gpu_operator.kubelet.allocation import PodDevices
from gpu_operator.names import keys

log = logging.getLogger(__name__)
GPU_RESOURCE = keys.GPU_RESOURCE
MIG_RESOURCE_PREFIX = keys.MIG_RESOURCE_PREFIX
Attribution = Mapping[str, Sequence[PodRef]]


class PodLister(Protocol):
    """What pod labels and UIDs need of the cluster API (a ``NodeCluster`` is one)."""

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]: ...


def device_keys(device_id: str, *, mig_keys: Mapping[str, str]) -> list[str]:
    """Every key a device id stands for (see the module docstring)."""
    keys = [device_id]
    base = device_id.split("::", 1)[0].split("/vgpu", 1)[0]
    if base != device_id:
        keys.append(base)
    if base in mig_keys:
        keys.append(mig_keys[base])
    return keys


def considered(resource: str, *, extra: Iterable[str] = ()) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX) or resource in extra


def attribution(
    pods: Sequence[PodDevices],
    *,
    mig_keys: Mapping[str, str] | None = None,
    extra_resources: Iterable[str] = (),
    metadata: Mapping[tuple[str, str], PodInfo] | None = None,
    labels: bool = False,
    uid: bool = False,
) -> dict[str, list[PodRef]]:
    """Key -> the containers holding it, in PodResources order (the last one wins without virtual GPUs).

    ``metadata`` (namespace, name) -> the pod from the API adds its UID and labels when asked for."""
    extra = frozenset(extra_resources)
    out: dict[str, list[PodRef]] = {}
    for pod in pods:
        info = (metadata or {}).get((pod.namespace, pod.name))
        pod_uid = info.uid if info is not None and uid else ""
        pod_labels = tuple(sorted(info.labels.items())) if info is not None and labels else ()
        for container in pod.containers:
            ref = PodRef(
                pod=pod.name, namespace=pod.namespace, container=container.name, uid=pod_uid, labels=pod_labels
            )
            for devices in container.devices:
                if not considered(devices.resource_name, extra=extra):
                    continue
                for device_id in devices.device_ids:
                    for key in device_keys(device_id, mig_keys=mig_keys or {}):
                        holders = out.setdefault(key, [])
                        if ref not in holders:
                            holders.append(ref)
    return out


class PodMapper:
    """Calls ``List`` on the PodResources socket once per collection; keeps the last good answer."""

    def __init__(
        self,
        *,
        socket: Path,
        timeout: float = 10.0,
        extra_resources: Iterable[str] = (),
        name: str = "exporter",
        cluster: PodLister | None = None,
        labels: bool = False,
        uid: bool = False,
    ) -> None:
        self.socket = socket
        self.cluster = cluster
        self.labels = labels
        self.uid = uid
        self.metadata: dict[tuple[str, str], PodInfo] = {}
        self.metadata_failures = 0
        self.timeout = timeout
        self.extra_resources = tuple(extra_resources)
        self.name = name
        self.pods: list[PodDevices] = []
        self.failures = 0
        self._warned_missing = False

    async def refresh(self) -> list[PodDevices]:
        """The pods with devices now (the previous answer when the call fails)."""
        # The gRPC stack is imported only when attribution is on: it is most of this exporter's memory.
        from gpu_operator.kubelet.podresources import list_pod_resources  # noqa: PLC0415

        if not self.socket.exists():
            if not self._warned_missing:
                log.warning(
                    "%s: no PodResources socket at %s: pod attribution is off until it appears", self.name, self.socket
                )
                self._warned_missing = True
            self.pods = []
            return self.pods
        self._warned_missing = False
        try:
            self.pods = await asyncio.wait_for(
                list_pod_resources(socket=self.socket, timeout=self.timeout), timeout=self.timeout + 1.0
            )
            self.failures = 0
        except Exception as exc:  # any failure of the kubelet call keeps the last mapping
            self.failures += 1
            # Log the first failure and then every tenth, so a kubelet outage does not flood the log.
            if self.failures == 1 or self.failures % 10 == 0:
                log.warning(
                    "%s: PodResources List on %s failed (%d in a row), keeping the last pod mapping: %s",
                    self.name,
                    self.socket,
                    self.failures,
                    exc or type(exc).__name__,
                )
        if self.pods and (self.labels or self.uid):
            await self._refresh_metadata()
        return self.pods

    async def _refresh_metadata(self) -> None:
        if self.cluster is None:
            if self.metadata_failures == 0:
                log.warning("%s: pod labels or UIDs are on but this agent has no cluster API access", self.name)
            self.metadata_failures += 1
            return
        try:
            listed = await asyncio.wait_for(self.cluster.list_pods(), timeout=self.timeout)
        except Exception as exc:  # any API failure keeps the last labels, as for PodResources
            self.metadata_failures += 1
            if self.metadata_failures == 1 or self.metadata_failures % 10 == 0:
                log.warning("%s: listing this node's pods failed, keeping the last pod labels: %s", self.name, exc)
            return
        self.metadata_failures = 0
        self.metadata = {(p.namespace, p.name): p for p in listed}

    def attribution(self, *, mig_keys: Mapping[str, str]) -> dict[str, list[PodRef]]:
        return attribution(
            self.pods,
            mig_keys=mig_keys,
            extra_resources=self.extra_resources,
            metadata=self.metadata,
            labels=self.labels,
            uid=self.uid,
        )
