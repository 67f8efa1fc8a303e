"""Checks of the JSON that Network Operator resources carry in strings (CEL cannot parse JSON).

The device plugins' ``config``, Multus' ``config``, the networks' ``ipam`` and ``metaPlugins`` are
strings holding JSON that lands verbatim in a ConfigMap or a NetworkAttachmentDefinition: a typo there
surfaces only as a crash-looping plugin or a pod that cannot attach. These predicates (True: fine)
back the models' offline :class:`~gpu_operator.api.base.Rule` entries, so ``gpu-operator validate``
and the reconciler name the field before anything is deployed. Absent or empty strings are fine:
upstream then uses its built-in default.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: k8s-rdma-shared-dev-plugin accepts only these resource names (and refuses duplicates).
RDMA_RESOURCE_NAME = re.compile(r"^[a-zA-Z0-9_]+$")
#: sriov-network-device-plugin's resource names (upstream's webhook pattern).
SRIOV_RESOURCE_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.]*)?[A-Za-z0-9]$")
#: A resourcePrefix is a domain name such as nvidia.com (upstream's webhook pattern).
RESOURCE_PREFIX = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z]{2,})+$")


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def is_json_object(text: str | None) -> bool:
    """``text`` is absent, empty, or one JSON object."""
    return not text or isinstance(_load(text), dict)


def is_plugin_sequence(text: str | None) -> bool:
    """``text`` is absent, empty, or comma-separated JSON objects without brackets (``metaPlugins``),
    which the renderer appends to a CNI ``plugins`` list."""
    if not text:
        return True
    items = _load(f"[{text}]")
    return isinstance(items, list) and bool(items) and all(isinstance(i, dict) and "type" in i for i in items)


def _entries(text: str | None, key: str) -> list[Any] | None:
    """The list under ``key`` of a JSON object in ``text``; None when the JSON is not an object
    (the JSON rule reports that, so the entry rules stay quiet)."""
    if not text:
        return []
    doc = _load(text)
    if not isinstance(doc, dict):
        return None
    entries = doc.get(key, [])
    return entries if isinstance(entries, list) else [entries]


def _prefix_ok(entry: dict[str, Any]) -> bool:
    prefix = entry.get("resourcePrefix")
    return prefix is None or (isinstance(prefix, str) and bool(RESOURCE_PREFIX.fullmatch(prefix)))


def rdma_config_ok(text: str | None) -> bool:
    """Every ``configList`` entry of an RDMA shared device plugin config has a valid, unique
    ``resourceName`` and, if given, a domain-name ``resourcePrefix``."""
    entries = _entries(text, "configList")
    if entries is None:
        return True
    names: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            return False
        name = entry.get("resourceName")
        if not isinstance(name, str) or not RDMA_RESOURCE_NAME.fullmatch(name) or not _prefix_ok(entry):
            return False
        names.append(name)
    return len(names) == len(set(names))


def sriov_config_ok(text: str | None) -> bool:
    """Every ``resourceList`` entry of an SR-IOV device plugin config has a valid ``resourceName``
    and, if given, a domain-name ``resourcePrefix``."""
    entries = _entries(text, "resourceList")
    if entries is None:
        return True
    for entry in entries:
        if not isinstance(entry, dict):
            return False
        name = entry.get("resourceName")
        if not isinstance(name, str) or not SRIOV_RESOURCE_NAME.fullmatch(name) or not _prefix_ok(entry):
            return False
    return True
