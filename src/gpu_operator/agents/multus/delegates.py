"""From a pod's networks to what the CNI shim runs, and from what it ran to ``network-status`` (pure).

:func:`plan_delegates` turns each :class:`~.selection.NetworkSelection` and its
NetworkAttachmentDefinition into a :class:`Delegate`: the NAD's ``spec.config`` (one plugin's conf or
a conflist) with ``name`` (the NAD's name when the conf has none) and ``cniVersion`` (the cluster
network's when it has none) filled in, and, when the NAD has the annotation
``k8s.v1.cni.cncf.io/resourceName`` and the pod was given devices of that resource (PodResources),
``deviceID`` and ``pciBusID`` set to the next unused device (one per network, in order: a conflist
gets them in every plugin, as Multus does). What the annotation asks per network (``ips``, ``mac``,
``deviceID``) goes to the plugins as ``runtimeConfig`` (CNI capabilities), ``cni-args`` as
``args.cni``.

:func:`network_status` builds the ``k8s.v1.cni.cncf.io/network-status`` annotation from the results
the shim reports: per network its name (the cluster network's conf name, else ``namespace/name``),
interface and MAC (the result's interface inside the pod), IPs without prefix length, ``default``,
``dns`` and ``device-info`` when the device plugin left one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.agents.multus.selection import NetworkSelection
from gpu_operator.agents.shared import devinfo
from gpu_operator.agents.shared.configinput import load_json
from gpu_operator.kubelet.allocation import PodDevices

JSON = dict[str, Any]
RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: Where device plugins describe an allocated device for CNI plugins (the Device Info specification).
DP_DEVINFO_DIR = devinfo.DP_DEVINFO_DIR


class DelegateError(ValueError):
    """A network's NAD or devices do not make a delegate; the message names the pod and the NAD."""


@dataclass(frozen=True, kw_only=True)
class Delegate:
    """One secondary network as the shim runs it."""

    network: str  # "namespace/name"
    ifname: str
    conf: JSON  # a plugin's conf or a conflist, with name and cniVersion
    runtime_config: JSON = field(default_factory=dict)
    resource: str = ""
    device_id: str = ""

    def to_json(self) -> JSON:
        out: JSON = {"network": self.network, "ifname": self.ifname, "conf": self.conf}
        if self.runtime_config:
            out["runtimeConfig"] = self.runtime_config
        if self.device_id:
            out["resource"], out["deviceID"] = self.resource, self.device_id
        return out


def devices_of(pods: Sequence[PodDevices], *, namespace: str, name: str) -> dict[str, list[str]]:
    """Device IDs per resource the kubelet assigned to the pod's containers, in container order."""
    out: dict[str, list[str]] = {}
    for pod in pods:
        if (pod.namespace, pod.name) != (namespace, name):
            continue
        for container in pod.containers:
            for devices in container.devices:
                out.setdefault(devices.resource_name, []).extend(devices.device_ids)
    return out


def nad_conf(nad: Mapping[str, Any], *, default_version: str, where: str) -> JSON:
    """The NAD's ``spec.config`` as a conf or conflist with ``name`` and ``cniVersion`` filled in."""
    meta = nad.get("metadata") or {}
    text = (nad.get("spec") or {}).get("config") or ""
    if not isinstance(text, str) or not text.strip():
        raise DelegateError(f"{where}: spec.config is empty (a CNI conf or conflist is required)")
    # Bounded: no nesting past 32 levels nor integers past 18 digits (Python's reader fails on those
    # with errors that name nothing), so the NAD and the field are always in the message.
    conf = load_json(text, source=f"{where}: spec.config", error=DelegateError)
    if not isinstance(conf, dict):
        raise DelegateError(f"{where}: spec.config must be a JSON object")
    if "type" not in conf:
        plugins = conf.get("plugins")
        if not isinstance(plugins, list) or not plugins:
            raise DelegateError(f"{where}: spec.config has neither 'type' (a conf) nor 'plugins' (a conflist)")
        for index, plugin in enumerate(plugins):
            if not isinstance(plugin, dict) or not isinstance(plugin.get("type"), str) or not plugin["type"]:
                raise DelegateError(f"{where}: spec.config: plugins[{index}].type is missing")
    elif not isinstance(conf["type"], str) or not conf["type"]:
        raise DelegateError(f"{where}: spec.config: type must be a plugin name")
    conf.setdefault("name", str(meta.get("name", "")))
    conf.setdefault("cniVersion", default_version)
    return conf


def _with_device(conf: JSON, device_id: str) -> JSON:
    targets = conf.get("plugins", [conf])
    for plugin in targets:
        plugin["deviceID"] = device_id
        plugin["pciBusID"] = device_id
    return conf


def _with_args(conf: JSON, args: Mapping[str, Any]) -> JSON:
    targets = conf.get("plugins", [conf])
    for plugin in targets:
        holder = plugin.setdefault("args", {})
        holder.setdefault("cni", {}).update(args)
    return conf


def plan_delegates(
    *,
    pod: str,
    selections: Sequence[NetworkSelection],
    nads: Sequence[Mapping[str, Any]],
    devices: Mapping[str, Sequence[str]],
    default_version: str,
    primary_ifname: str = "eth0",
) -> list[Delegate]:
    """The delegates of pod ``pod`` (``namespace/name``): ``nads[i]`` is the NAD of ``selections[i]``."""
    used: dict[str, int] = {}
    out: list[Delegate] = []
    for selection, nad in zip(selections, nads, strict=True):
        where = f"pod {pod}: NetworkAttachmentDefinition {selection.key}"
        if selection.interface == primary_ifname:
            raise DelegateError(f"{where}: interface {primary_ifname} is the cluster network's")
        conf = nad_conf(nad, default_version=default_version, where=where)
        resource = str(((nad.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_ANNOTATION, ""))
        device_id = ""
        if resource:
            assigned = list(devices.get(resource, ()))
            index = used.get(resource, 0)
            if index >= len(assigned):
                have = f"only {len(assigned)}" if assigned else "none"
                raise DelegateError(
                    f"{where}: annotation {RESOURCE_ANNOTATION} is {resource}, but the pod was given {have} "
                    f"of it (each such network needs one device: request {resource} in the pod's resources)"
                )
            used[resource] = index + 1
            device_id = assigned[index]
            conf = _with_device(conf, device_id)
        if selection.cni_args:
            conf = _with_args(conf, selection.cni_args)
        runtime: JSON = {}
        if selection.ips:
            runtime["ips"] = list(selection.ips)
        if selection.mac:
            runtime["mac"] = selection.mac
        if device_id or selection.device_id:
            runtime["deviceID"] = device_id or selection.device_id
        out.append(Delegate(network=selection.key, ifname=selection.interface, conf=conf, runtime_config=runtime,
                            resource=resource if device_id else "", device_id=device_id))  # fmt: skip
    return out


def devinfo_file(*, resource: str, device_id: str) -> str:
    """The node path where a device plugin describes ``device_id`` of ``resource`` (Device Info spec)."""
    return f"{DP_DEVINFO_DIR}/{devinfo.devinfo_file_name(resource=resource, device_id=device_id)}"


def _address(ip: Mapping[str, Any]) -> str:
    return str(ip.get("address", "")).split("/", 1)[0]


def status_entry(
    *, name: str, ifname: str, result: Mapping[str, Any], default: bool, device_info: Mapping[str, Any] | None = None
) -> JSON:
    """One network's ``network-status`` entry from its CNI result (any result version from 0.3.0 on)."""
    interfaces = [i for i in result.get("interfaces") or () if isinstance(i, dict)]
    in_pod = [(n, i) for n, i in enumerate(interfaces) if i.get("sandbox")]
    chosen = next(((n, i) for n, i in in_pod if i.get("name") == ifname), in_pod[-1] if in_pod else None)
    entry: JSON = {"name": name, "interface": ifname}
    ips = []
    for ip in result.get("ips") or ():
        if not isinstance(ip, dict) or not ip.get("address"):
            continue
        index = ip.get("interface")
        if chosen is None or index is None or index == chosen[0]:
            ips.append(_address(ip))
    if ips:
        entry["ips"] = ips
    if chosen is not None:
        entry["interface"] = str(chosen[1].get("name") or ifname)
        if chosen[1].get("mac"):
            entry["mac"] = str(chosen[1]["mac"])
        if chosen[1].get("mtu"):
            entry["mtu"] = chosen[1]["mtu"]
    if default:
        entry["default"] = True
    entry["dns"] = dict(result.get("dns") or {})
    if device_info:
        entry["device-info"] = dict(device_info)
    return entry


def network_status(reports: Sequence[Mapping[str, Any]], *, device_infos: Mapping[str, JSON] | None = None) -> str:
    """The annotation's value from the shim's report (``network``, ``ifname``, ``default``, ``result``,
    ``deviceID``), the cluster network first; ``device_infos`` by device ID."""
    infos = device_infos or {}
    entries = [
        status_entry(
            name=str(r.get("network", "")), ifname=str(r.get("ifname", "")), result=r.get("result") or {},
            default=bool(r.get("default")), device_info=infos.get(str(r.get("deviceID", ""))),
        )
        for r in reports
    ]  # fmt: skip
    return json.dumps(entries, indent=1)
