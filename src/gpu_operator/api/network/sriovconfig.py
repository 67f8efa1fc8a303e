"""The SR-IOV network device plugin's config file (``/etc/pcidp/config.json``), as upstream reads it.

``{"resourceList": [{"resourcePrefix", "resourceName", "deviceType", "excludeTopology", "selectors",
"additionalInfo"}, ...]}``. ``resourcePrefix`` falls back to the plugin-wide prefix (upstream's
``--resource-prefix``, default ``intel.com``; here ``SRIOV_DP_RESOURCE_PREFIX``). ``selectors`` is one
object or a non-empty list of objects; a device matching any of them joins the pool, and within one
object every given field must match (``pfNames``/``rootDevices`` entries may carry a VF-index list
after ``#``: ``ens1f0#0-3,7``).

What this implementation serves differs from upstream in these ways, each reported, never silent:

* ``deviceType`` ``accelerator`` (class 0x12) and ``auxNetDevice`` (subfunctions) are valid upstream
  values but are not served here: such a resource is skipped with a warning naming its field.
* Selectors that need facts our NIC backend does not read (``acpiIndexes``, ``ddpProfiles``,
  ``vdpaType``, ``pKeys``, ``auxTypes``) skip their resource with a warning too, rather than match
  more devices than asked for.
* Keys upstream does not know are ignored as upstream's JSON decoding does, but listed as warnings.

Errors (bad JSON, wrong types, an invalid or duplicate resource name, a malformed ``pfNames`` range)
raise :class:`ConfigError` naming the file and the field: ``config.json: resourceList[0].selectors.vendors: ...``.
So do text that is not UTF-8, JSON nested deeper than 32 levels or holding an integer of more than 18
digits, and lists past their bounds (:data:`MAX_RESOURCES` resources, :data:`MAX_SELECTORS` selector
objects per resource, :data:`MAX_LIST_ITEMS` items in a selector's list), all checked before anything
is built. :func:`parse_config` is the one parser of this format: the node's plugin calls it on its
file (``agents.sriovdp.config.load_config``), and the NicClusterPolicy model on its embedded
``sriovDevicePlugin.config`` (offline and in the operator), so what validates is what the node takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpu_operator.api.jsontext import ConfigRefusedError, describe, load_json

DEFAULT_CONFIG = "/etc/pcidp/config.json"
DEFAULT_PREFIX = "intel.com"
NET_DEVICE = "netDevice"
DEVICE_TYPES = (NET_DEVICE, "accelerator", "auxNetDevice")
_DIGITS = re.compile(r"^[0-9]{1,5}$")
_NAME = re.compile(r"^[a-zA-Z0-9_]+$")  # upstream validResourceName: no "-" (it ends up in an env name)
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LISTS = {
    "vendors": "vendors",
    "devices": "devices",
    "drivers": "drivers",
    "pciAddresses": "pci_addresses",
    "pfNames": "pf_names",
    "rootDevices": "root_devices",
    "linkTypes": "link_types",
}
_FLAGS = {"isRdma": "is_rdma", "needVhostNet": "need_vhost_net"}
_UNSERVED = ("acpiIndexes", "ddpProfiles", "vdpaType", "pKeys", "auxTypes")
_RESOURCE_KEYS = {"resourcePrefix", "resourceName", "deviceType", "excludeTopology", "selectors", "additionalInfo"}
MAX_RESOURCES = 256
MAX_SELECTORS = 64
MAX_LIST_ITEMS = 1024
#: A VF index: no NIC has more than a few hundred VFs per PF; the bound keeps int() away from huge text.
MAX_VF_INDEX = 65535


class ConfigError(ConfigRefusedError):
    """The config file cannot be used; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True)
class Selector:
    """One selector object: every non-empty field must match (empty fields match everything)."""

    vendors: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    drivers: tuple[str, ...] = ()
    pci_addresses: tuple[str, ...] = ()
    pf_names: tuple[str, ...] = ()
    root_devices: tuple[str, ...] = ()
    link_types: tuple[str, ...] = ()
    is_rdma: bool = False
    need_vhost_net: bool = False


@dataclass(frozen=True, kw_only=True)
class ResourceConfig:
    resource_prefix: str
    resource_name: str
    device_type: str = NET_DEVICE
    exclude_topology: bool = False
    selectors: tuple[Selector, ...] = (Selector(),)
    #: ``"*"`` or a PCI address -> extra key/values for the ``_INFO`` variable (upstream ``additionalInfo``).
    additional_info: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def full_name(self) -> str:
        """``intel.com/sriov_a``: the extended resource name pods request."""
        return f"{self.resource_prefix}/{self.resource_name}"


@dataclass(frozen=True, kw_only=True)
class Config:
    resources: tuple[ResourceConfig, ...] = ()
    warnings: tuple[str, ...] = ()


def _quote(text: str) -> str:
    """``text`` quoted for a message, cut short when long (it is someone's input)."""
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def parse_vf_range(text: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``"ens1f0#0-3,7"`` -> ``("ens1f0", ((0, 3), (7, 7)))``; no ``#``: no range (every function)."""
    name, sep, spec = text.partition("#")
    if not name:
        raise ValueError("the name before '#' is empty")
    if not sep:
        return name, ()
    ranges: list[tuple[int, int]] = []
    for entry in spec.split(","):
        first, dash, last = entry.partition("-")
        if not _DIGITS.fullmatch(first) or (dash and not _DIGITS.fullmatch(last)):
            raise ValueError(f"{_quote(entry)} is not an index (0 to {MAX_VF_INDEX}) or a range like 0-3")
        start, end = int(first), int(last) if dash else int(first)
        if end > MAX_VF_INDEX or start > MAX_VF_INDEX:
            raise ValueError(f"{_quote(entry)}: VF indices go from 0 to {MAX_VF_INDEX}")
        if end < start:
            raise ValueError(f"range {entry!r} ends before it starts")
        ranges.append((start, end))
    return name, tuple(ranges)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[str] = []

    def fail(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {message}")

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"{self.source}: {where}: {message}")

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, f"must be a list of strings (got {describe(value)})")
        if len(value) > MAX_LIST_ITEMS:
            raise self.fail(where, f"at most {MAX_LIST_ITEMS} items, got {len(value)}")
        return tuple(value)

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"must be true or false (got {describe(value)})")
        return value

    def selector(self, raw: Any, where: str) -> Selector | None:
        if not isinstance(raw, dict):
            raise self.fail(where, f"must be an object (got {describe(raw)})")
        values: dict[str, Any] = {}
        unserved = []
        for key, value in raw.items():
            if key in _LISTS:
                values[_LISTS[key]] = self.strings(value, f"{where}.{key}")
            elif key in _FLAGS or key == "IsRdma":  # upstream's field has no JSON tag: either spelling
                values[_FLAGS.get(key, "is_rdma")] = self.flag(value, f"{where}.{key}")
            elif key in _UNSERVED:
                if value not in (None, "", [], False):
                    unserved.append(key)
            else:
                self.warn(f"{where}.{key}", "unknown selector, ignored (as upstream does)")
        for key in ("pfNames", "rootDevices"):
            for index, entry in enumerate(values.get(_LISTS[key], ())):
                try:
                    parse_vf_range(entry)
                except ValueError as error:
                    raise self.fail(f"{where}.{key}[{index}]", f"{_quote(entry)}: {error}") from error
        if unserved:
            self.warn(f"{where}.{unserved[0]}", "not supported by this implementation; resource skipped")
            return None
        return Selector(**values)

    def resource(self, raw: Any, where: str, default_prefix: str) -> ResourceConfig | None:
        if not isinstance(raw, dict):
            raise self.fail(where, f"must be an object (got {describe(raw)})")
        for key in sorted(set(raw) - _RESOURCE_KEYS):
            self.warn(f"{where}.{key}", "unknown key, ignored (as upstream does)")
        name = raw.get("resourceName")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise self.fail(f"{where}.resourceName", f"must match {_NAME.pattern} (got {describe(name)})")
        prefix = raw.get("resourcePrefix") or default_prefix
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise self.fail(f"{where}.resourcePrefix", f"must be a DNS subdomain (got {describe(prefix)})")
        device_type = raw.get("deviceType") or NET_DEVICE
        if device_type not in DEVICE_TYPES:
            raise self.fail(f"{where}.deviceType", f"unsupported deviceType {describe(device_type)}")
        exclude = self.flag(raw.get("excludeTopology", False), f"{where}.excludeTopology")
        info = self.additional_info(raw.get("additionalInfo", {}), f"{where}.additionalInfo")
        if "selectors" not in raw:
            raise self.fail(f"{where}.selectors", "required: an object or a list of objects")
        raw_selectors = raw["selectors"]
        if isinstance(raw_selectors, list):
            if not raw_selectors:
                raise self.fail(f"{where}.selectors", "needs at least one selector")
            if len(raw_selectors) > MAX_SELECTORS:
                raise self.fail(f"{where}.selectors", f"at most {MAX_SELECTORS} selectors, got {len(raw_selectors)}")
            parsed = [self.selector(s, f"{where}.selectors[{i}]") for i, s in enumerate(raw_selectors)]
        else:
            parsed = [self.selector(raw_selectors, f"{where}.selectors")]
        if device_type != NET_DEVICE:
            self.warn(f"{where}.deviceType", f"{device_type} is not served by this implementation; resource skipped")
            return None
        selectors = [s for s in parsed if s is not None]
        if len(selectors) < len(parsed):
            return None
        return ResourceConfig(
            resource_prefix=prefix,
            resource_name=name,
            device_type=device_type,
            exclude_topology=exclude,
            selectors=tuple(selectors),
            additional_info=info,
        )

    def additional_info(self, raw: Any, where: str) -> Mapping[str, Mapping[str, str]]:
        if not isinstance(raw, dict):
            raise self.fail(where, "must be an object of objects of strings")
        out: dict[str, Mapping[str, str]] = {}
        for key, values in raw.items():
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise self.fail(f"{where}.{key}", "must be an object of strings")
            out[key] = MappingProxyType(dict(values))
        return MappingProxyType(out)


def parse_config(text: str, *, source: str, default_prefix: str = DEFAULT_PREFIX) -> Config:
    """The config in ``text``; ``source`` names the file in errors and warnings."""
    raw = load_json(text, source=source, error=ConfigError)
    reader = _Reader(source)
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the config must be a JSON object with a resourceList")
    for key in sorted(set(raw) - {"resourceList"}):
        reader.warn(key, "unknown key, ignored (as upstream does)")
    entries = raw.get("resourceList")
    entries = [] if entries is None else entries
    if not isinstance(entries, list):
        raise reader.fail("resourceList", "must be a list of resource objects")
    if len(entries) > MAX_RESOURCES:
        raise reader.fail("resourceList", f"at most {MAX_RESOURCES} resources, got {len(entries)}")
    resources: list[ResourceConfig] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"resourceList[{index}]"
        resource = reader.resource(entry, where, default_prefix)
        if resource is None:
            continue
        if resource.full_name in seen:
            raise reader.fail(
                f"{where}.resourceName",
                f"{resource.full_name} already defined by resourceList[{seen[resource.full_name]}]",
            )
        seen[resource.full_name] = index
        resources.append(resource)
    return Config(resources=tuple(resources), warnings=tuple(reader.warnings))
