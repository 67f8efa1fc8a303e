"""The NVML backend: the real GPUs of this machine, through ``pynvml`` and ``libnvidia-ml.so.1``.

Identity, topology and MIG are read straight from NVML on every call (handles are cheap, and MIG
changes renumber things); the MIG calls live in ``nvml_mig``, health events in ``nvml_health``,
readings in ``nvml_readings``. Optional queries (serial, NUMA node, architecture, ...) degrade to
defaults when NVML says "not supported"; identity queries (name, UUID, PCI info, memory) must answer. A GPU that
answers "GPU is lost" is remembered, reported once as a lost health event and left out of samples.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from gpu_operator.gpu import nvml_health, nvml_identity, nvml_lib, nvml_mig, nvml_readings
from gpu_operator.gpu.backend import GpuError, GpuLostError
from gpu_operator.gpu.nvml_lib import bus_id, call, optional, text
from gpu_operator.gpu.types import Device, HealthEvent, Link, LinkType, MigDevice, Sample

T = TypeVar("T")
_MIB = 1 << 20
# NVML architecture enum -> GFD family names (Ada is "ada-lovelace" there).
_ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada-lovelace",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
# nvmlDeviceGetTopologyCommonAncestor levels -> link types.
_LEVELS = {
    0: LinkType.SAME_BOARD,
    10: LinkType.SINGLE_SWITCH,
    20: LinkType.MULTI_SWITCH,
    30: LinkType.HOST_BRIDGE,
    40: LinkType.SAME_CPU,
    50: LinkType.CROSS_CPU,
}


class NvmlBackend:
    """GpuBackend over NVML. Creating one initialises NVML (GpuNotFoundError without a driver)."""

    name = "nvml"

    def __init__(self) -> None:
        nvml_lib.acquire()
        self._nv = nvml_lib.nvml()
        self._closed = False
        self._lock = threading.Lock()
        self._health = nvml_health.HealthWatch(self)
        self._readings = nvml_readings.Readings(self)

    # --- GpuBackend ---------------------------------------------------------------------------

    def driver_version(self) -> str:
        self._check()
        return text(call("nvmlSystemGetDriverVersion", self._nv.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> tuple[int, int]:
        self._check()
        version = int(call("nvmlSystemGetCudaDriverVersion_v2", self._nv.nvmlSystemGetCudaDriverVersion_v2))
        return version // 1000, version % 1000 // 10  # 12040 -> (12, 4)

    def devices(self) -> Sequence[Device]:
        self._check()
        return [self.gpu_call(i, self._describe) for i in range(self.count())]

    def topology(self) -> Sequence[Link]:
        self._check()
        count = self.count()
        handles = [self.gpu_call(i, lambda i, h: h) for i in range(count)]
        buses = {self.gpu_call(i, self._bus_id): i for i in range(count)}
        direct: Counter[tuple[int, int]] = Counter()
        switched: Counter[int] = Counter()
        for i in range(count):
            for remote in self.gpu_call(i, self._nvlink_remotes):
                peer = buses.get(remote)
                if peer is None:
                    switched[i] += 1  # the far end is an NVSwitch: every switched GPU is reachable
                elif peer > i:
                    direct[i, peer] += 1  # counted from the lower index only, seen from both ends
        links = []
        for a in range(count):
            for b in range(a + 1, count):
                lanes = direct[a, b] + min(switched[a], switched[b])
                if lanes:
                    links.append(Link(a=a, b=b, type=LinkType.NVLINK, nvlinks=lanes))
                    continue
                level = self.gpu_call(a, partial(self._common_ancestor, peer=handles[b]))
                links.append(Link(a=a, b=b, type=_LEVELS.get(int(level), LinkType.CROSS_CPU)))
        return links

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        self._check()
        return self.gpu_call(index, lambda i, h: nvml_mig.list_devices(self._nv, i, h, self._total_mib(i, h)))

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        self._check()
        return self.gpu_call(index, lambda i, h: nvml_mig.set_mode(self._nv, i, h, enabled=enabled))

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        self._check()

        def create(i: int, h: Any) -> Sequence[MigDevice]:
            return nvml_mig.create(self._nv, i, h, self._total_mib(i, h), requested=profiles)

        return self.gpu_call(index, create)

    def sample(self) -> Sequence[Sample]:
        self._check()
        self._health.poll()  # the last XID of each GPU, up to now
        out = []
        for i in range(self.count()):
            try:
                out.append(self.gpu_call(i, self._reading))
            except GpuLostError:
                continue  # left out of the reading; the lost event says why
        return out

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        self._check()
        return self._health.wait(timeout=timeout)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._health.close()
        self._readings.close()
        nvml_lib.release()

    # --- helpers shared with nvml_health ------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def count(self) -> int:
        return int(call("nvmlDeviceGetCount", self._nv.nvmlDeviceGetCount))

    def handle(self, index: int) -> Any:
        return call("nvmlDeviceGetHandleByIndex", self._nv.nvmlDeviceGetHandleByIndex, index, what=f"GPU {index}")

    def gpu_call(self, index: int, fn: Callable[[int, Any], T]) -> T:
        """``fn(index, handle)``; a GpuLostError on the way marks GPU ``index`` lost (one lost event)."""
        try:
            return fn(index, self.handle(index))
        except GpuLostError as exc:
            self._health.mark_lost(index, str(exc))
            raise GpuLostError(f"GPU {index} is lost: {exc}") from exc

    def uuid(self, index: int, handle: Any) -> str:
        value = text(call("nvmlDeviceGetUUID", self._nv.nvmlDeviceGetUUID, handle, what=f"GPU {index}"))
        self._health.remember(index, value)  # a lost GPU can no longer tell its UUID
        return value

    # --- internals ----------------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise GpuError("NVML backend is closed")

    def _reading(self, index: int, handle: Any) -> Sample:
        return self._readings.reading(index, handle, last_xid=self._health.last_xid)

    def _bus_id(self, index: int, handle: Any) -> str:
        return bus_id(call("nvmlDeviceGetPciInfo", self._nv.nvmlDeviceGetPciInfo, handle, what=f"GPU {index}").busId)

    def _common_ancestor(self, index: int, handle: Any, *, peer: Any) -> int:
        fn = self._nv.nvmlDeviceGetTopologyCommonAncestor
        return int(call("nvmlDeviceGetTopologyCommonAncestor", fn, handle, peer, what=f"GPU {index}"))

    def _total_mib(self, index: int, handle: Any) -> int:
        memory = call("nvmlDeviceGetMemoryInfo", self._nv.nvmlDeviceGetMemoryInfo, handle, what=f"GPU {index}")
        return int(memory.total) // _MIB

    def _nvlink_remotes(self, index: int, handle: Any) -> list[str]:
        """PCI bus ids at the far end of each active NVLink (empty without NVLink)."""
        nv, where, out = self._nv, f"GPU {index}", []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                active = call("nvmlDeviceGetNvLinkState", nv.nvmlDeviceGetNvLinkState, handle, link, what=where)
            except GpuLostError:
                raise
            except GpuError:
                break  # not supported, or past the GPU's last link (invalid argument)
            if active:
                fn = nv.nvmlDeviceGetNvLinkRemotePciInfo
                out.append(bus_id(call("nvmlDeviceGetNvLinkRemotePciInfo", fn, handle, link, what=where).busId))
        return out

    def _describe(self, index: int, handle: Any) -> Device:
        nv, where = self._nv, f"GPU {index}"
        pci = call("nvmlDeviceGetPciInfo", nv.nvmlDeviceGetPciInfo, handle, what=where)
        major, minor = call("nvmlDeviceGetCudaComputeCapability", nv.nvmlDeviceGetCudaComputeCapability, handle)
        arch = optional("nvmlDeviceGetArchitecture", nv.nvmlDeviceGetArchitecture, handle, default=-1, what=where)
        numa = optional("nvmlDeviceGetNumaNodeId", nv.nvmlDeviceGetNumaNodeId, handle, default=-1, what=where)
        minor_number = optional("nvmlDeviceGetMinorNumber", nv.nvmlDeviceGetMinorNumber, handle, default=-1)
        serial = optional("nvmlDeviceGetSerial", nv.nvmlDeviceGetSerial, handle, default="", what=where)
        part = optional("nvmlDeviceGetBoardPartNumber", nv.nvmlDeviceGetBoardPartNumber, handle, default="")
        total = self._total_mib(index, handle)
        mode = nvml_mig.mode(nv, index, handle)
        profiles = nvml_mig.profiles(nv, index, handle, total) if mode is not None else ()
        return Device(
            index=index,
            uuid=self.uuid(index, handle),
            name=text(call("nvmlDeviceGetName", nv.nvmlDeviceGetName, handle, what=where)),
            pci_bus_id=bus_id(pci.busId),
            memory_mib=total,
            compute_capability=(int(major), int(minor)),
            architecture=_ARCHITECTURES.get(int(arch)) or _family(int(major), int(minor)),
            serial=text(serial),
            board_part_number=text(part),
            numa_node=int(numa) if int(numa) >= 0 else None,
            pci_device_id=int(pci.pciDeviceId),
            minor_number=int(minor_number) if int(minor_number) >= 0 else None,
            mig_capable=mode is not None,
            mig_enabled=bool(mode and mode[0]),
            mig_pending=bool(mode and mode[0] != mode[1]),
            mig_profiles=tuple(profiles),
            pci_class=nvml_identity.pci_class(nv, handle, what=where),
            fabric_clique=nvml_identity.fabric_clique(nv, handle, what=where),
        )


def _family(major: int, minor: int) -> str:
    """The family from the compute capability, for drivers without nvmlDeviceGetArchitecture."""
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    return {5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell", 12: "blackwell"}.get(major, "undefined")
