"""What the simulated kubelet shares across nodes (:class:`SimCore`), what a pod worker needs from its node
(:class:`PodHost`), and the runtime's tunables (:class:`RuntimeOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.kube.restclient import ApiClient
from gpu_operator.kubelet.paths import KubeletDirs
from gpu_operator.sim.kubelet.devices import DeviceManager
from gpu_operator.sim.kubelet.heartbeat import Heartbeat
from gpu_operator.sim.programs.programs import ProgramRegistry


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """Timings of the simulated kubelet. The restart back-off starts lower than the kubelet's 10 s (tests
    and demos would otherwise wait), doubling up to ``restart_backoff_max``; grace periods are capped."""

    restart_backoff: float = 1.0
    restart_backoff_max: float = 30.0
    grace_cap: float = 10.0
    setup_retry: float = 2.0
    #: How often ConfigMap and Secret volumes are re-read (the kubelet's sync period is about a minute).
    volume_resync: float = 10.0
    #: The status manager (``statuswriter``): the shortest time between two write-backs of a pod status
    #: someone else changed (the kubelet's status sync period), doubling while they are undone again.
    status_repair: float = 10.0
    status_repair_max: float = 80.0


class PodHost(Protocol):
    """One simulated node, as seen by the pods on it."""

    @property
    def name(self) -> str: ...

    @property
    def host_ip(self) -> str: ...

    @property
    def host_root(self) -> Path: ...

    @property
    def dirs(self) -> KubeletDirs: ...

    @property
    def gpu(self) -> GpuBackend: ...

    @property
    def devices(self) -> DeviceManager: ...

    @property
    def api(self) -> ApiClient: ...

    @property
    def registry(self) -> ProgramRegistry: ...

    @property
    def api_server(self) -> str: ...

    def pod_ip(self, uid: str, *, host_network: bool) -> str: ...

    def release_pod_ip(self, uid: str) -> None: ...

    def service_env(self) -> dict[str, str]:
        """``KUBERNETES_SERVICE_HOST``/``PORT`` and friends, pointing at the real API server."""
        ...


@dataclass(frozen=True, kw_only=True)
class SimCore:
    """One API client, one heartbeat loop and one program registry for all nodes; ``root`` holds their
    host directories; ``seed`` makes the simulated GPUs reproducible."""

    api: ApiClient
    heartbeat: Heartbeat
    registry: ProgramRegistry
    root: Path
    runtime: RuntimeOptions
    kubelet_version: str
    seed: int = 0
