"""The simulated backend: the GPUs of a catalog node profile, with MIG, metrics and injectable faults.

One instance is one node. Everything it reports derives from the node profile, a seed and the node
name, so runs are reproducible; tests and the simulated-node layer drive it with fault methods
(``inject_xid``, ``lose_gpu``, ``recover_gpu``, ``set_load``, ``set_driver_version``,
``set_present``, ``reset_gpu``) from any thread while an agent blocks in ``wait_health_events``.

The backend owns no thread and no module-level state: a Condition guards the instance, and per-GPU
state is created on first use, so a thousand nodes in one process cost little.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from gpu_operator.gpu import recovery
from gpu_operator.gpu.backend import GpuError, GpuLostError, GpuNotFoundError, NotSupportedError
from gpu_operator.gpu.catalog import GpuModel, NodeProfile, cuda_version_for_driver
from gpu_operator.gpu.mig import device_profile, plan_geometry
from gpu_operator.gpu.mig_attributes import attributes_for
from gpu_operator.gpu.simstate import SimGpu
from gpu_operator.gpu.types import Device, HealthEvent, Link, MigDevice, Sample

_DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
_MAX_QUEUED_EVENTS = 1024  # an agent that never reads must not grow the node without bound
_DBE_XIDS = frozenset({48, 94, 95})  # XIDs reporting uncorrectable (double-bit / contained) ECC errors


class SimulatedBackend:
    """GpuBackend over the GPUs of ``profile``."""

    name = "simulated"

    def __init__(
        self,
        *,
        profile: NodeProfile,
        seed: int = 0,
        driver_version: str | None = None,
        node_name: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._profile = profile
        self._model: GpuModel | None = profile.model
        self._seed = seed
        self._node = node_name
        self._clock = clock
        self._driver = driver_version or profile.driver_version
        self._cuda = cuda_version_for_driver(self._driver, default=profile.cuda_driver_version)
        self._present = profile.gpu_count > 0
        self._closed = False
        self._gpus: dict[int, SimGpu] = {}
        self._events: deque[HealthEvent] = deque(maxlen=_MAX_QUEUED_EVENTS)
        self._recovery: dict[int, tuple[int, int]] = {}  # index -> (recovery action asked for, its XID)
        self._cond = threading.Condition()

    # --- GpuBackend ---------------------------------------------------------------------------

    def driver_version(self) -> str:
        with self._cond:
            self._check_driver()
            return self._driver

    def cuda_driver_version(self) -> tuple[int, int]:
        with self._cond:
            self._check_driver()
            return self._cuda

    def devices(self) -> Sequence[Device]:
        with self._cond:
            self._check()
            return [self._device(self._gpu(i, use=True)) for i in range(self._profile.gpu_count)]

    def topology(self) -> Sequence[Link]:
        with self._cond:
            self._check()
            for i in range(self._profile.gpu_count):
                self._gpu(i, use=True)
            return list(self._profile.links())

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        with self._cond:
            self._check()
            return self._with_attributes(self._gpu(index, use=True).mig)

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        with self._cond:
            self._check()
            gpu = self._mig_gpu(index)
            model = self._require_model()
            gpu.mig_target = enabled
            if not model.mig_reset_required and gpu.mig_target != gpu.mig_enabled:
                self._reset(gpu)
            return gpu.mig_target != gpu.mig_enabled

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        with self._cond:
            self._check()
            gpu = self._mig_gpu(index)
            model = self._require_model()
            if not gpu.mig_enabled:
                raise GpuError(f"GPU {index}: MIG mode is disabled; enable it (and reset the GPU) first")
            plans = plan_geometry(available=model.mig_profiles, requested=profiles, gpu=f"GPU {index}")
            gpu.mig_generation += 1
            # GPU instance IDs from 1, compute instance IDs from 0 within each, as NVML numbers them.
            instances = [(gi_id, ci_id, plan, size) for gi_id, plan in enumerate(plans, 1) for ci_id, size in
                         enumerate(plan.compute)]  # fmt: skip
            gpu.mig = [
                MigDevice(
                    uuid=gpu.mig_uuid(seed=self._seed, node_name=self._node, gi_id=gi_id, ci_id=ci_id),
                    parent_index=index,
                    profile=device_profile(compute=size, gi=plan.profile),
                    gi_id=gi_id,
                    ci_id=ci_id,
                    memory_mib=plan.profile.memory_mib,
                    index=slot,
                )
                for slot, (gi_id, ci_id, plan, size) in enumerate(instances)
            ]
            return self._with_attributes(gpu.mig)

    def sample(self) -> Sequence[Sample]:
        with self._cond:
            self._check()
            model = self._require_model() if self._profile.gpu_count else None
            now = self._clock()
            gpus = [self._gpu(i) for i in range(self._profile.gpu_count)]
            return [g.reading(model=model, t=now) for g in gpus if model and not g.lost]

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        with self._cond:
            self._check()
            self._cond.wait_for(lambda: bool(self._events) or self._closed or self._unloaded(), timeout=timeout)
            self._check()
            events = list(self._events)
            self._events.clear()
            return events

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()  # a thread blocked in wait_health_events returns now

    # --- faults and controls (simulation only) ------------------------------------------------

    def inject_xid(self, index: int, xid: int, *, gi_id: int | None = None, ci_id: int | None = None) -> None:
        """Report XID ``xid`` on GPU ``index`` (on one of its MIG GPU instances with ``gi_id``)."""
        with self._cond:
            gpu = self._gpu(index)
            if gi_id is not None:
                owner = next((m for m in gpu.mig if m.gi_id == gi_id), None)
                if owner is None:
                    raise GpuError(f"GPU {index}: no MIG GPU instance {gi_id}")
                ci_id = owner.ci_id if ci_id is None else ci_id
            gpu.last_xid = xid
            if xid in _DBE_XIDS:
                gpu.ecc_dbe += 1
            action = recovery.action_for_xid(xid)
            if action != recovery.NONE:  # as the driver does: the XID sets the GPU's recovery action
                self._recovery[index] = (action, xid)
            self._emit(HealthEvent(uuid=gpu.uuid, xid=xid, gi_id=gi_id, ci_id=ci_id, message=f"XID {xid}"))

    def lose_gpu(self, index: int) -> None:
        """GPU ``index`` falls off the bus: its calls raise GpuLostError and a lost event is emitted."""
        with self._cond:
            gpu = self._gpu(index)
            if not gpu.lost:
                gpu.lost = True
                self._emit(HealthEvent(uuid=gpu.uuid, lost=True, message="GPU has fallen off the bus"))

    def recover_gpu(self, index: int) -> None:
        """GPU ``index`` is healthy again (after a loss or an XID fault); a recovered event is emitted."""
        with self._cond:
            gpu = self._gpu(index)
            gpu.lost = False
            self._recovery.pop(index, None)
            self._emit(HealthEvent(uuid=gpu.uuid, recovered=True, message="GPU healthy again"))

    def reset_gpu(self, index: int) -> None:
        """What ``nvidia-smi -r`` does: apply a pending MIG mode change; MIG devices do not survive it.

        A reset also satisfies the recovery action an XID asked for (``gpu.recovery``): the action goes
        back to none and a recovered event (``reset=True``) says so, as the NVML backend reports it.
        """
        with self._cond:
            gpu = self._gpu(index, use=True)
            self._reset(gpu)
            action, xid = self._recovery.pop(index, (recovery.NONE, 0))
            if recovery.needs_reset(action):
                message = f"GPU reset cleared XID {xid} ({recovery.describe(action)} was required)"
                self._emit(HealthEvent(uuid=gpu.uuid, recovered=True, reset=True, message=message))

    def recovery_action(self, index: int) -> int:
        """The recovery action GPU ``index`` waits for (``gpu.recovery``; NONE when there is none)."""
        with self._cond:
            return self._recovery.get(index, (recovery.NONE, 0))[0]

    def set_readings(self, index: int, **values: object) -> None:
        """Give GPU ``index`` fixed readings (``Sample`` attribute names), as a test gives the fake driver
        values; ``None`` makes a reading unsupported. Unknown names raise ValueError naming them."""
        known = {f.name for f in dataclasses.fields(Sample)} - {"uuid"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"not readings of a Sample: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        with self._cond:
            self._gpu(index).pinned.update(values)

    def set_load(self, index: int, pct: float) -> None:
        """Set the load level (0-100 %) that drives GPU ``index``'s utilisation, power and temperature."""
        if not 0 <= pct <= 100:
            raise ValueError(f"load must be between 0 and 100 %, got {pct}")
        with self._cond:
            self._gpu(index).load = float(pct)

    def set_driver_version(self, version: str) -> None:
        """Pretend a different driver is loaded (driver upgrades); the CUDA version follows the branch."""
        if not _DRIVER_VERSION.match(version):
            raise ValueError(f"not a driver version: {version!r} (expected e.g. 550.54.15)")
        with self._cond:
            self._driver = version
            self._cuda = cuda_version_for_driver(version, default=self._cuda)

    def set_present(self, present: bool) -> None:
        """Load or unload the driver: while absent every call raises GpuNotFoundError."""
        with self._cond:
            self._present = present and self._profile.gpu_count > 0
            self._cond.notify_all()

    # --- internals (callers hold the lock) ----------------------------------------------------

    def _unloaded(self) -> bool:
        return not self._present and self._profile.gpu_count > 0

    def _check(self) -> None:
        if self._closed:
            raise GpuError("simulated backend is closed")
        if self._unloaded():
            raise GpuNotFoundError(f"NVIDIA driver not loaded on simulated node {self._node or '(unnamed)'}")

    def _check_driver(self) -> None:
        self._check()
        if not self._profile.gpu_count:
            raise GpuNotFoundError(f"no NVIDIA driver: node profile {self._profile.name} has no GPU")

    def _require_model(self) -> GpuModel:
        if self._model is None:
            raise GpuNotFoundError(f"node profile {self._profile.name} has no GPU")
        return self._model

    def _gpu(self, index: int, *, use: bool = False) -> SimGpu:
        if not 0 <= index < self._profile.gpu_count:
            raise GpuError(f"no GPU {index}: the node has {self._profile.gpu_count}")
        gpu = self._gpus.get(index)
        if gpu is None:
            gpu = self._gpus[index] = SimGpu(seed=self._seed, node_name=self._node, index=index, now=self._clock())
        if use and gpu.lost:
            raise GpuLostError(f"GPU {index} ({gpu.uuid}) is lost: it fell off the bus")
        return gpu

    def _mig_gpu(self, index: int) -> SimGpu:
        gpu = self._gpu(index, use=True)
        if not self._require_model().mig_capable:
            raise NotSupportedError(f"GPU {index} ({self._require_model().name}) does not support MIG")
        return gpu

    def _reset(self, gpu: SimGpu) -> None:
        gpu.mig_enabled = gpu.mig_target
        gpu.mig = []

    def _emit(self, event: HealthEvent) -> None:
        self._events.append(event)
        self._cond.notify_all()

    def _with_attributes(self, migs: Sequence[MigDevice]) -> list[MigDevice]:
        """The MIG devices with what NVML's nvmlDeviceGetAttributes would report for each."""
        profiles = self._require_model().mig_profiles
        return [dataclasses.replace(m, attributes=attributes_for(m.profile, profiles=profiles)) for m in migs]

    def _device(self, gpu: SimGpu) -> Device:
        model = self._require_model()
        return Device(
            index=gpu.index,
            uuid=gpu.uuid,
            name=model.name,
            pci_bus_id=self._profile.pci_bus_id(gpu.index),
            memory_mib=model.memory_mib,
            compute_capability=model.compute_capability,
            architecture=model.architecture,
            serial=gpu.serial,
            board_part_number=model.board_part_number,
            numa_node=self._profile.numa_node(gpu.index),
            pci_device_id=model.pci_device_id,
            pci_class=model.pci_class,
            minor_number=gpu.index,
            mig_capable=model.mig_capable,
            mig_enabled=gpu.mig_enabled,
            mig_pending=gpu.mig_target != gpu.mig_enabled,
            mig_profiles=model.mig_profiles,
        )
