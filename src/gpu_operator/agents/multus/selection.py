"""Which secondary networks a pod asks for: its ``k8s.v1.cni.cncf.io/networks`` annotation (pure).

Two forms, as the Network Plumbing Working Group's specification has them:

- a comma list of ``[namespace/]name[@interface]`` (``macvlan-a, other/hostdev-a@data0``), each part a
  DNS-1123 label;
- a JSON list of objects with ``name`` (required), ``namespace``, ``interface``, ``ips``, ``mac``,
  ``cni-args`` and ``deviceID``; ``name`` and ``namespace`` are DNS-1123 labels as in the comma form
  (they become API paths).

A network without a namespace is looked up in the pod's. Interfaces are ``net1``, ``net2``, ... by
position unless an entry names its own; two entries on one interface are an error. Every error names
the pod, the annotation and the entry, on one line, whatever the text: JSON nested past 32 levels or
holding an integer of more than 18 digits is refused naming the entry, never a traceback, and at most
:data:`MAX_NETWORKS` networks are read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.agents.shared.configinput import describe, load_json

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: Linux interface names: at most 15 bytes, no '/', no whitespace, not "." or "..".
_IFNAME = re.compile(r"^[^/\s:]{1,15}$")
#: Secondary networks of one pod: each is a NAD read and a CNI ADD, so the count is bounded.
MAX_NETWORKS = 128


class MultusError(ValueError):
    """A pod's networks cannot be set up as asked; the message names the pod and what is wrong."""


@dataclass(frozen=True, kw_only=True)
class NetworkSelection:
    """One entry of the annotation, namespace filled in and interface decided."""

    namespace: str
    name: str
    interface: str
    ips: tuple[str, ...] = ()
    mac: str = ""
    cni_args: Mapping[str, Any] = field(default_factory=dict)
    device_id: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``: the network's name in ``network-status``."""
        return f"{self.namespace}/{self.name}"


def _where(pod: str, index: int, entry: str) -> str:
    return f"pod {pod}: annotation {NETWORKS_ANNOTATION}: entry {index + 1} ({entry})"


def _text_entry(item: str, *, pod: str, index: int) -> tuple[str, str, str]:
    where = _where(pod, index, repr(item))
    parts = item.split("/")
    if len(parts) > 2:
        raise MultusError(f"{where}: more than one '/' (expected [namespace/]name[@interface])")
    namespace, rest = (parts[0].strip(), parts[1]) if len(parts) == 2 else ("", parts[0])
    names = rest.split("@")
    if len(names) > 2:
        raise MultusError(f"{where}: more than one '@' (expected [namespace/]name[@interface])")
    name = names[0].strip()
    interface = names[1].strip() if len(names) == 2 else ""
    for what, value in (("namespace", namespace), ("name", name), ("interface", interface)):
        if value and not _LABEL.fullmatch(value):
            raise MultusError(f"{where}: {what} {value!r} is not a DNS-1123 label (lower case a-z, 0-9 and '-')")
    if not name:
        raise MultusError(f"{where}: the network name is empty")
    return namespace, name, interface


def _strings(value: Any, *, where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MultusError(f"{where}: {what} must be a list of strings")
    return tuple(value)


def _string(obj: Mapping[str, Any], key: str, *, where: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MultusError(f"{where}: {key} must be a string")
    return value


def _json_entry(obj: Any, *, pod: str, index: int) -> dict[str, Any]:
    # ``load_json`` bounded depth and integers, so dumping is safe; the text is cut for the message.
    where = _where(pod, index, json.dumps(obj)[:80] if isinstance(obj, dict) else describe(obj))
    if not isinstance(obj, dict):
        raise MultusError(f"{where}: each entry must be an object")
    name = _string(obj, "name", where=where)
    if not name:
        raise MultusError(f"{where}: name is required")
    namespace = _string(obj, "namespace", where=where)
    for what, value in (("namespace", namespace), ("name", name)):
        if value and not _LABEL.fullmatch(value):
            raise MultusError(f"{where}: {what} {value!r} is not a DNS-1123 label (lower case a-z, 0-9 and '-')")
    cni_args = obj.get("cni-args") or {}
    if not isinstance(cni_args, dict):
        raise MultusError(f"{where}: cni-args must be an object")
    return {
        "namespace": namespace,
        "name": name,
        "interface": _string(obj, "interface", where=where),
        "ips": _strings(obj.get("ips"), where=where, what="ips"),
        "mac": _string(obj, "mac", where=where),
        "cni_args": dict(cni_args),
        "device_id": _string(obj, "deviceID", where=where),
    }


def parse_networks(text: str, *, pod_namespace: str, pod_name: str) -> list[NetworkSelection]:
    """The networks the annotation ``text`` of pod ``pod_namespace/pod_name`` asks for, in order."""
    pod = f"{pod_namespace}/{pod_name}"
    text = text.strip()
    if not text:
        return []
    raw: list[dict[str, Any]] = []
    source = f"pod {pod}: annotation {NETWORKS_ANNOTATION}"
    if any(c in text for c in '[{"'):
        loaded = load_json(text, source=source, error=MultusError)
        if not isinstance(loaded, list):
            raise MultusError(f"{source}: the JSON form must be a list")
        if len(loaded) > MAX_NETWORKS:
            raise MultusError(f"{source}: at most {MAX_NETWORKS} networks, got {len(loaded)}")
        raw = [_json_entry(obj, pod=pod, index=i) for i, obj in enumerate(loaded)]
    else:
        items = [item.strip() for item in text.split(",")]
        if len(items) > MAX_NETWORKS:
            raise MultusError(f"{source}: at most {MAX_NETWORKS} networks, got {len(items)}")
        for index, item in enumerate(items):
            if not item:
                raise MultusError(f"pod {pod}: annotation {NETWORKS_ANNOTATION}: entry {index + 1} is empty")
            namespace, name, interface = _text_entry(item, pod=pod, index=index)
            raw.append({"namespace": namespace, "name": name, "interface": interface})
    selections: list[NetworkSelection] = []
    taken: dict[str, int] = {}
    for index, entry in enumerate(raw):
        interface = entry.pop("interface") or f"net{index + 1}"
        where = _where(pod, index, f"{entry['namespace'] or pod_namespace}/{entry['name']}")
        if not _IFNAME.fullmatch(interface) or interface in (".", ".."):
            raise MultusError(f"{where}: interface {interface!r} is not a valid interface name")
        if interface in taken:
            raise MultusError(f"{where}: interface {interface} is already used by entry {taken[interface] + 1}")
        taken[interface] = index
        entry["namespace"] = entry["namespace"] or pod_namespace
        selections.append(NetworkSelection(interface=interface, **entry))
    return selections
