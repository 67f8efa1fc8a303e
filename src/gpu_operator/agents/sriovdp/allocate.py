"""What a container gets from the SR-IOV device plugin's Allocate, as upstream answers (pure).

For the requested PCI addresses of one resource ``<prefix>/<name>``:

* ``PCIDEVICE_<PREFIX>_<NAME>``: the addresses, comma-separated, in request order; the variable name
  is the prefix and name joined with ``_``, upper-cased, with ``.`` turned into ``_`` (exactly
  upstream's rule: a ``-`` in a resource name stays).
* ``PCIDEVICE_<PREFIX>_<NAME>_INFO``: JSON, per address a map of info kinds to string maps:
  ``generic`` (``deviceID``), ``rdma`` (``uverbs``, ``umad``, ``issm``, ``rdma_cm`` char device
  paths and ``rdma_dev``) when the selector asked ``isRdma``, ``vhost`` (``net-mount``,
  ``tun-mount``) with ``needVhostNet``, and ``extra`` from ``additionalInfo`` (``"*"`` then the
  address). Keys sorted and no spaces, as Go's encoder writes it.
* Device specs (``rw``, host path = container path): the RDMA char devices of isRdma devices,
  ``/dev/vhost-net`` and ``/dev/net/tun`` for needVhostNet; deduplicated by host path. With CDI the
  specs move into the CDI spec (kind ``<prefix>/net-pci``, one device per address) and the response
  carries the ``cdi.k8s.io/<prefix>_net-pci`` annotation instead.
* A device-info file per address (the network-attachment-definition device-info spec, version
  1.1.0) named ``<prefix>-<name>-<address>-device.json`` in the devinfo directory, which the CNI
  (through Multus) reads: ``{"type":"pci","version":"1.1.0","pci":{"pci-address":..,"rdma-device":..}}``.

Not modelled: ``vfio-pci``/``uio`` bound VFs get generic info only (no ``/dev/vfio`` specs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.agents.shared import cdi, devinfo
from gpu_operator.agents.shared.netpluginserver import AllocateError
from gpu_operator.kubelet.allocation import ContainerAllocation, DeviceNodeSpec, PluginDevice
from gpu_operator.nic.types import RdmaDevice

DEVINFO_DIR = devinfo.DP_DEVINFO_DIR
DEVINFO_VERSION = "1.1.0"
CDI_CLASS = "net-pci"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
#: Upstream's CDI spec files start with this; the program removes them all at start.
CDI_SPEC_PREFIX = "sriov-dp-"
VHOST_NET = "/dev/vhost-net"
TUN = "/dev/net/tun"
_RDMA_KEYS = ("uverbs", "umad", "issm", "rdma_cm")


@dataclass(frozen=True, kw_only=True)
class PoolDevice:
    """One advertised device and what Allocate needs to know about it."""

    address: str
    numa_node: int | None = None
    rdma: tuple[RdmaDevice, ...] = ()  # only when its selector asked isRdma
    vhost_net: bool = False  # needVhostNet and the node has /dev/vhost-net
    extra: Mapping[str, str] | None = None  # additionalInfo for it (None: the resource has none)

    def plugin_device(self, *, exclude_topology: bool) -> PluginDevice:
        numa = () if exclude_topology or self.numa_node is None else (self.numa_node,)
        return PluginDevice(id=self.address, numa_nodes=numa)


def env_name(*, prefix: str, name: str) -> str:
    """``PCIDEVICE_INTEL_COM_SRIOV_A`` for ``intel.com/sriov_a``."""
    return f"PCIDEVICE_{prefix}_{name}".replace(".", "_").upper()


def rdma_info(device: PoolDevice) -> dict[str, str]:
    info: dict[str, str] = {}
    for rdma in device.rdma:
        for path in rdma.char_devices:
            key = next((k for k in _RDMA_KEYS if k in path), None)
            if key is not None:
                info[key] = path
    if device.rdma:
        info["rdma_dev"] = device.rdma[0].name
    return info


def env_info(device: PoolDevice) -> dict[str, dict[str, str]]:
    """The ``_INFO`` entry of one device."""
    info: dict[str, dict[str, str]] = {"generic": {"deviceID": device.address}}
    if device.rdma:
        info["rdma"] = rdma_info(device)
    if device.vhost_net:
        info["vhost"] = {"net-mount": VHOST_NET, "tun-mount": TUN}
    if device.extra is not None:
        info["extra"] = dict(device.extra)
    return info


def device_specs(devices: Sequence[PoolDevice]) -> tuple[DeviceNodeSpec, ...]:
    """The device nodes of ``devices``, each host path once."""
    paths: list[str] = []
    for device in devices:
        for rdma in device.rdma:
            paths.extend(rdma.char_devices)
        if device.vhost_net:
            paths.extend((VHOST_NET, TUN))
    unique = dict.fromkeys(paths)
    return tuple(DeviceNodeSpec(container_path=p, host_path=p, permissions="rw") for p in unique)


def device_info(device: PoolDevice) -> dict[str, Any]:
    """The device-info file content of one device (network-attachment-definition spec)."""
    pci: dict[str, str] = {"pci-address": device.address}
    if device.rdma:
        pci["rdma-device"] = ",".join(r.name for r in device.rdma)
    return {"type": "pci", "version": DEVINFO_VERSION, "pci": pci}


def devinfo_file_name(*, resource_name: str, device_id: str) -> str:
    """``nvidia.com-sriov_a-0000:3b:00.2-device.json`` for ``nvidia.com/sriov_a`` (see ``agents.shared.devinfo``)."""
    return devinfo.devinfo_file_name(resource=resource_name, device_id=device_id)


def render_json(value: Any) -> str:
    """JSON as Go's encoder writes maps: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def render_device_info(device: PoolDevice) -> str:
    """The device-info file's text: no spaces, fields in the spec's struct order (as Go writes structs)."""
    return json.dumps(device_info(device), separators=(",", ":"))


def cdi_kind(prefix: str) -> str:
    return f"{prefix}/{CDI_CLASS}"


def cdi_annotations(*, prefix: str, device_ids: Sequence[str]) -> dict[str, str]:
    """Upstream's annotation: ``cdi.k8s.io/<prefix>_net-pci`` -> ``<prefix>/net-pci=<address>,...``."""
    return {f"{CDI_ANNOTATION_PREFIX}{prefix}_{CDI_CLASS}": ",".join(f"{cdi_kind(prefix)}={i}" for i in device_ids)}


def cdi_spec(*, prefix: str, devices: Sequence[PoolDevice]) -> dict[str, Any]:
    """The CDI spec of one pool: a device per address with its device nodes."""
    entries = []
    for device in devices:
        nodes = [
            {"path": s.container_path, "hostPath": s.host_path, "permissions": "rw"} for s in device_specs([device])
        ]
        entries.append({"name": device.address, "containerEdits": {"deviceNodes": nodes}})
    return {"cdiVersion": cdi.CDI_VERSION, "kind": cdi_kind(prefix), "devices": entries}


def cdi_spec_file_name(*, prefix: str, name: str) -> str:
    """``sriov-dp-nvidia.com-net-pci-sriov_a.json`` (upstream's name, as JSON)."""
    return f"{CDI_SPEC_PREFIX}{prefix}-{CDI_CLASS}-{name}.json"


def allocation(
    *, prefix: str, name: str, devices: Mapping[str, PoolDevice], device_ids: Sequence[str], use_cdi: bool
) -> ContainerAllocation:
    """The response for one container asking ``device_ids`` of pool ``devices`` (by address)."""
    unknown = [i for i in device_ids if i not in devices]
    if unknown:
        raise AllocateError(f"{prefix}/{name}: unknown device(s) {', '.join(unknown)}")
    if len(set(device_ids)) != len(device_ids):
        raise AllocateError(f"{prefix}/{name}: a device is asked for twice: {', '.join(device_ids)}")
    chosen = [devices[i] for i in device_ids]
    key = env_name(prefix=prefix, name=name)
    envs = {
        key: ",".join(device_ids),
        f"{key}_INFO": render_json({d.address: env_info(d) for d in chosen}),
    }
    if use_cdi:
        return ContainerAllocation(
            resource_name=f"{prefix}/{name}",
            device_ids=tuple(device_ids),
            envs=envs,
            annotations=cdi_annotations(prefix=prefix, device_ids=device_ids),
        )
    return ContainerAllocation(
        resource_name=f"{prefix}/{name}", device_ids=tuple(device_ids), envs=envs, devices=device_specs(chosen)
    )
