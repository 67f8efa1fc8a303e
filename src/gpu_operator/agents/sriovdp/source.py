"""One SR-IOV resource pool as a :class:`PluginSource`: its devices, Allocate, and its node files.

Allocate answers with :mod:`allocate`'s response and writes each allocated device's device-info file
(replacing an older one, mode 0444 as upstream). Upstream removes the files of a pool's devices when
its server starts and stops (never on deallocation: the kubelet does not tell a plugin); so does
:meth:`PoolSource.clean_device_info`, which the program calls for a pool it starts serving and on
exit. With CDI the pool's spec (``sriov-dp-<prefix>-net-pci-<name>.json``) is written by
:meth:`PoolSource.write_cdi_spec`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import MappingProxyType

from gpu_operator.agents.shared import cdi
from gpu_operator.agents.shared.files import write_atomic
from gpu_operator.agents.sriovdp import allocate
from gpu_operator.agents.sriovdp.allocate import PoolDevice
from gpu_operator.agents.sriovdp.config import ResourceConfig
from gpu_operator.agents.sriovdp.selectors import Pool
from gpu_operator.kubelet.allocation import ContainerAllocation, PluginDevice

log = logging.getLogger(__name__)


def pool_devices(pool: Pool, *, vhost_net_present: bool) -> tuple[PoolDevice, ...]:
    """What Allocate needs per device of ``pool`` (RDMA only where the selector asked isRdma)."""
    resource = pool.resource
    out = []
    for candidate, selector in pool.devices:
        function = candidate.function
        extra: dict[str, str] | None = None
        if resource.additional_info:
            extra = {}
            for key in ("*", function.address):
                extra.update(resource.additional_info.get(key, {}))
        out.append(
            PoolDevice(
                address=function.address,
                numa_node=function.numa_node,
                rdma=function.rdma if selector.is_rdma else (),
                vhost_net=selector.need_vhost_net and vhost_net_present,
                extra=MappingProxyType(extra) if extra is not None else None,
            )
        )
    return tuple(out)


class PoolSource:
    """The plugin source of one resource (see the module docstring)."""

    def __init__(
        self, *, resource: ResourceConfig, devices: Sequence[PoolDevice], devinfo_dir: Path, use_cdi: bool
    ) -> None:
        self.resource = resource
        self.pool = MappingProxyType({d.address: d for d in devices})
        self.devinfo_dir = devinfo_dir
        self.use_cdi = use_cdi

    @property
    def resource_name(self) -> str:
        return self.resource.full_name

    @property
    def endpoint(self) -> str:
        """``intel.com_sriov_a.sock``: upstream's socket name."""
        return f"{self.resource.resource_prefix}_{self.resource.resource_name}.sock"

    def devices(self) -> Sequence[PluginDevice]:
        return [d.plugin_device(exclude_topology=self.resource.exclude_topology) for d in self.pool.values()]

    def allocate(self, *, device_ids: Sequence[str]) -> ContainerAllocation:
        response = allocate.allocation(
            prefix=self.resource.resource_prefix,
            name=self.resource.resource_name,
            devices=self.pool,
            device_ids=device_ids,
            use_cdi=self.use_cdi,
        )
        for device_id in device_ids:
            self._write_device_info(self.pool[device_id])
        return response

    def devinfo_path(self, device_id: str) -> Path:
        name = allocate.devinfo_file_name(resource_name=self.resource_name, device_id=device_id)
        return self.devinfo_dir / name

    def _write_device_info(self, device: PoolDevice) -> None:
        path = self.devinfo_path(device.address)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        path.write_text(allocate.render_device_info(device), encoding="utf-8")
        path.chmod(0o444)

    def clean_device_info(self, device_ids: Iterable[str] | None = None) -> None:
        """Remove the device-info files of these (default: all) devices (upstream: at server start and stop)."""
        for device_id in self.pool if device_ids is None else device_ids:
            try:
                self.devinfo_path(device_id).unlink(missing_ok=True)
            except OSError as error:
                log.warning("sriov-dp: cannot remove %s: %s", self.devinfo_path(device_id), error)

    def cdi_spec_path(self, spec_dir: Path) -> Path:
        name = allocate.cdi_spec_file_name(prefix=self.resource.resource_prefix, name=self.resource.resource_name)
        return spec_dir / name

    def write_cdi_spec(self, spec_dir: Path) -> bool:
        """Write (or keep) this pool's CDI spec; True when the file changed."""
        spec = allocate.cdi_spec(prefix=self.resource.resource_prefix, devices=list(self.pool.values()))
        return write_atomic(self.cdi_spec_path(spec_dir), cdi.render(spec), backup=False)


def remove_cdi_specs(spec_dir: Path) -> None:
    """Remove every ``sriov-dp-*`` spec (upstream cleans them all at start)."""
    if not spec_dir.is_dir():
        return
    for path in spec_dir.glob(f"{allocate.CDI_SPEC_PREFIX}*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
