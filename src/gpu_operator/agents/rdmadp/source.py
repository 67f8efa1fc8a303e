"""One advertised resource of the RDMA shared device plugin: a ``netplugin.PluginSource``. Pure.

As upstream: the resource ``<resourcePrefix>/<resourceName>`` is served on ``<resourceName>.sock`` and
advertises ``rdmaHcaMax`` identical, healthy devices with IDs ``"0"`` .. ``"<rdmaHcaMax-1>"`` while at least
one matched function has a complete RDMA device, and none otherwise. Any number of containers share the
HCAs: each Allocate answers, per container, the same list, every character device of every matched HCA
(``/dev/infiniband/uverbsN``, ``umadN``, ``issmN`` and ``rdma_cm``) with ``host_path == container_path``
and permissions ``rwm``; with CDI it names the CDI devices of those functions instead (``cdi``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpu_operator.agents.rdmadp import cdi
from gpu_operator.agents.rdmadp.config import RdmaConfig, ResourceConfig
from gpu_operator.agents.rdmadp.selectors import char_devices, select, with_rdma
from gpu_operator.agents.shared.netplugin import AllocateError
from gpu_operator.kubelet.allocation import ContainerAllocation, DeviceNodeSpec, PluginDevice
from gpu_operator.nic.types import NetFunction

PERMISSIONS = "rwm"


@dataclass(frozen=True, kw_only=True)
class RdmaSource:
    """A configured resource and the functions its selectors matched."""

    config: ResourceConfig
    matched: tuple[NetFunction, ...]
    char_devices: tuple[str, ...]  # what every container gets (empty: nothing to advertise)
    cdi_names: tuple[str, ...] = ()  # qualified CDI device names, when CDI is on
    use_cdi: bool = False

    @property
    def resource_name(self) -> str:
        return self.config.resource_name

    @property
    def endpoint(self) -> str:
        return f"{self.config.name}.sock"

    def devices(self) -> Sequence[PluginDevice]:
        if not self.char_devices:
            return []
        return [PluginDevice(id=str(n)) for n in range(self.config.rdma_hca_max)]

    def allocate(self, *, device_ids: Sequence[str]) -> ContainerAllocation:
        if not self.char_devices:
            raise AllocateError(f"no RDMA device matches the selectors of {self.config.name}")
        if self.use_cdi:
            return ContainerAllocation(
                resource_name=self.resource_name,
                device_ids=tuple(device_ids),
                annotations=cdi.container_annotations(self.cdi_names),
                cdi_devices=self.cdi_names,
            )
        return ContainerAllocation(
            resource_name=self.resource_name,
            device_ids=tuple(device_ids),
            devices=tuple(
                DeviceNodeSpec(container_path=p, host_path=p, permissions=PERMISSIONS) for p in self.char_devices
            ),
        )


def make_source(*, config: ResourceConfig, functions: Iterable[NetFunction], use_cdi: bool = False) -> RdmaSource:
    """The source of ``config`` over the node's ``functions``."""
    matched = tuple(select(functions, config.selectors))
    names = tuple(cdi.qualified_name(f.address) for f in with_rdma(matched)) if use_cdi else ()
    return RdmaSource(
        config=config, matched=matched, char_devices=char_devices(matched), cdi_names=names, use_cdi=use_cdi
    )


def make_sources(*, config: RdmaConfig, functions: Sequence[NetFunction], use_cdi: bool = False) -> list[RdmaSource]:
    """One source per configured resource, in the config's order."""
    return [make_source(config=resource, functions=functions, use_cdi=use_cdi) for resource in config.resources]
