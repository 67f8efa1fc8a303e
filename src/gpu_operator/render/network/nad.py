"""MacvlanNetwork, HostDeviceNetwork and IPoIBNetwork -> their NetworkAttachmentDefinition (pure).

The NAD is named after the network resource, in its ``networkNamespace`` (``default`` when unset),
and its ``spec.config`` is the CNI config as a JSON string, in upstream's shape: CNI version 0.3.1,
the plugin (``macvlan``, ``host-device``, ``ipoib``) with its settings and ``ipam`` (``{}`` when
none). ``metaPlugins`` (one or more JSON objects, comma-separated, as upstream takes them) turn the
config into a conflist: ``plugins`` is the main plugin followed by them. A HostDeviceNetwork's NAD
names its device resource in the ``NAD_RESOURCE_NAME`` annotation, ``nvidia.com/`` prefixed unless
it already is (as upstream), so Multus asks the kubelet which device the pod was given.

Malformed ``ipam`` or ``metaPlugins`` JSON raises :class:`ValueError` naming the field: the
reconciler reports it in the resource's status (upstream would write a broken NAD instead).
"""

from __future__ import annotations

import json
from typing import Any

from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.names import network as net

CNI_VERSION = "0.3.1"
RESOURCE_PREFIX = "nvidia.com/"
DEFAULT_NAMESPACE = "default"


def _object(text: str | None, *, field: str) -> dict[str, Any]:
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"spec.{field}: not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})") from err
    if not isinstance(value, dict):
        raise ValueError(f"spec.{field}: must be a JSON object")
    return value


def _meta_plugins(text: str | None) -> list[dict[str, Any]]:
    if not text or not text.strip():
        return []
    try:
        value = json.loads(f"[{text}]")  # upstream splices the text into a list: objects, comma-separated
    except json.JSONDecodeError as err:
        raise ValueError(f"spec.metaPlugins: not a comma-separated list of JSON objects: {err.msg}") from err
    if not all(isinstance(p, dict) for p in value):
        raise ValueError("spec.metaPlugins: every plugin must be a JSON object")
    return list(value)


def _config(name: str, plugin: dict[str, Any], meta_plugins: list[dict[str, Any]]) -> str:
    if meta_plugins:
        body: dict[str, Any] = {"cniVersion": CNI_VERSION, "name": name, "plugins": [plugin, *meta_plugins]}
    else:
        body = {"cniVersion": CNI_VERSION, "name": name, **plugin}
    return json.dumps(body, separators=(",", ":"))


def render_network(obj: MacvlanNetwork | HostDeviceNetwork | IPoIBNetwork) -> dict[str, Any]:
    """The NetworkAttachmentDefinition of one network resource (no owner reference: the reconciler adds it)."""
    name = obj.metadata.name
    spec = obj.spec
    namespace = spec.network_namespace or DEFAULT_NAMESPACE
    ipam = _object(spec.ipam, field="ipam")
    annotations: dict[str, str] = {}
    meta_plugins: list[dict[str, Any]] = []
    plugin: dict[str, Any]
    if isinstance(obj, MacvlanNetwork):
        plugin = {"type": "macvlan"}
        if obj.spec.master:
            plugin["master"] = obj.spec.master
        if obj.spec.mode:
            plugin["mode"] = obj.spec.mode
        if obj.spec.mtu:
            plugin["mtu"] = obj.spec.mtu
        meta_plugins = _meta_plugins(obj.spec.meta_plugins)
    elif isinstance(obj, HostDeviceNetwork):
        plugin = {"type": "host-device"}
        resource = obj.spec.resource_name or ""
        if resource:
            prefixed = resource if resource.startswith(RESOURCE_PREFIX) else f"{RESOURCE_PREFIX}{resource}"
            annotations[net.NAD_RESOURCE_NAME] = prefixed
        meta_plugins = _meta_plugins(obj.spec.meta_plugins)
    else:
        plugin = {"type": "ipoib"}
        if obj.spec.master:
            plugin["master"] = obj.spec.master
    plugin["ipam"] = ipam
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": net.NAD_API_VERSION,
        "kind": net.NAD_KIND,
        "metadata": meta,
        "spec": {"config": _config(name, plugin, meta_plugins)},
    }
