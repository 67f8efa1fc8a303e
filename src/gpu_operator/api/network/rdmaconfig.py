"""The RDMA shared device plugin's config file, in the format of Mellanox/k8s-rdma-shared-dev-plugin.

``{"periodicUpdateInterval": 60, "configList": [{"resourceName": "rdma_shared_device_a",
"resourcePrefix": "rdma", "rdmaHcaMax": 63, "selectors": {"vendors": ["15b3"], "deviceIDs": ["1021"],
"drivers": ["mlx5_core"], "ifNames": ["ens1f0"], "linkTypes": ["infiniband"]}}]}``

The same checks as upstream: at least one resource; names match ``^[a-zA-Z0-9_]+$`` and are unique;
``rdmaHcaMax`` and ``periodicUpdateInterval`` are not negative (the interval defaults to 60 s, 0 turns
re-discovery off); ``selectors`` or the deprecated ``devices`` (which becomes ``ifNames``), not both and
not neither; ``resourcePrefix`` defaults to ``rdma``. Upstream reports a wrong type as a JSON decode error;
here every error names the file and the field (``config.json: configList[1].resourceName: ...``).
Unknown keys are ignored, as upstream's decoder does, but reported as warnings.

Bounds upstream does not set, checked before anything is built: ``rdmaHcaMax`` at most
:data:`MAX_HCA` (every unit is a device the plugin lists to the kubelet), ``periodicUpdateInterval`` at
most a day, at most :data:`MAX_RESOURCES` resources and :data:`MAX_SELECTOR_ITEMS` items in a
selector list; JSON nested deeper than 32 levels or with an integer of more than 18 digits is refused
naming the field (Python's own reader would fail on such text with no field at all).
:func:`parse_config` is the one parser of this format: the node's plugin calls it on its file
(``agents.rdmadp.config.load_config``), and the NicClusterPolicy model on its embedded
``rdmaSharedDevicePlugin.config`` (offline and in the operator), so what validates is what the node takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.api.jsontext import ConfigRefusedError, describe, load_json

DEFAULT_PREFIX = "rdma"
DEFAULT_INTERVAL_SECONDS = 60
NAME = re.compile(r"^[a-zA-Z0-9_]+$")
SELECTOR_KEYS = ("vendors", "deviceIDs", "drivers", "ifNames", "linkTypes")
_RESOURCE_KEYS = ("resourceName", "resourcePrefix", "rdmaHcaMax", "devices", "selectors")
_TOP_KEYS = ("periodicUpdateInterval", "configList")
#: Devices one resource advertises: each is listed to the kubelet, so an unbounded value would build
#: millions before anything could refuse it. Upstream's examples use 63 to 1000.
MAX_HCA = 10000
MAX_INTERVAL_SECONDS = 86400
MAX_RESOURCES = 256
MAX_SELECTOR_ITEMS = 1024


class RdmaConfigError(ConfigRefusedError):
    """A config that cannot be used; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True)
class Selectors:
    """Which NICs a resource takes: every non-empty list must match (they AND together)."""

    vendors: tuple[str, ...] = ()
    device_ids: tuple[str, ...] = ()
    drivers: tuple[str, ...] = ()
    if_names: tuple[str, ...] = ()
    link_types: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.vendors or self.device_ids or self.drivers or self.if_names or self.link_types)


@dataclass(frozen=True, kw_only=True)
class ResourceConfig:
    name: str  # "rdma_shared_device_a"
    prefix: str = DEFAULT_PREFIX
    rdma_hca_max: int = 0
    selectors: Selectors = field(default_factory=Selectors)

    @property
    def resource_name(self) -> str:
        return f"{self.prefix}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class RdmaConfig:
    resources: tuple[ResourceConfig, ...]
    periodic_update_seconds: int = DEFAULT_INTERVAL_SECONDS
    warnings: tuple[str, ...] = ()


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[str] = []

    def error(self, path: str, message: str) -> RdmaConfigError:
        return RdmaConfigError(f"{self.source}: {path}: {message}")

    def unknown(self, obj: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
        for key in obj:
            if key not in known:
                where = f"{path}.{key}" if path else key
                self.warnings.append(f"{self.source}: {where}: unknown field, ignored (known: {', '.join(known)})")

    def integer(self, value: object, path: str, *, maximum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"expected an integer, got {describe(value)}")
        if value < 0:
            raise self.error(path, f"must not be negative, got {describe(value)}")
        if value > maximum:
            raise self.error(path, f"at most {maximum} is allowed, got {describe(value)}")
        return value

    def strings(self, value: object, path: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error(path, f"expected a list of strings, got {describe(value)}")
        if len(value) > MAX_SELECTOR_ITEMS:
            raise self.error(path, f"at most {MAX_SELECTOR_ITEMS} items, got {len(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{path}[{i}]", f"expected a string, got {describe(item)}")
        return tuple(value)

    def selectors(self, value: object, path: str) -> Selectors:
        if value is None:
            return Selectors()
        if not isinstance(value, dict):
            raise self.error(path, f"expected an object, got {describe(value)}")
        self.unknown(value, SELECTOR_KEYS, path)
        lists = {key: self.strings(value.get(key), f"{path}.{key}") for key in SELECTOR_KEYS}
        return Selectors(
            vendors=lists["vendors"],
            device_ids=lists["deviceIDs"],
            drivers=lists["drivers"],
            if_names=lists["ifNames"],
            link_types=lists["linkTypes"],
        )

    def resource(self, value: object, path: str) -> ResourceConfig:
        if not isinstance(value, dict):
            raise self.error(path, f"expected an object, got {describe(value)}")
        self.unknown(value, _RESOURCE_KEYS, path)
        name = value.get("resourceName")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise self.error(f"{path}.resourceName", f"{describe(name)} must match {NAME.pattern}")
        prefix = value.get("resourcePrefix")
        if prefix is not None and not isinstance(prefix, str):
            raise self.error(f"{path}.resourcePrefix", f"expected a string, got {describe(prefix)}")
        hca_max = self.integer(value.get("rdmaHcaMax", 0), f"{path}.rdmaHcaMax", maximum=MAX_HCA)
        if hca_max == 0:
            self.warnings.append(f"{self.source}: {path}.rdmaHcaMax: 0, so {name} advertises no devices")
        selectors = self.selectors(value.get("selectors"), f"{path}.selectors")
        devices = self.strings(value.get("devices"), f"{path}.devices")
        if selectors.empty and not devices:
            raise self.error(path, 'neither "selectors" nor the deprecated "devices" is set')
        if not selectors.empty and devices:
            raise self.error(path, 'both "selectors" and "devices" are set; use "selectors" only')
        if devices:
            self.warnings.append(f'{self.source}: {path}.devices: deprecated, read as "selectors": {{"ifNames": ...}}')
            selectors = Selectors(if_names=devices)
        return ResourceConfig(name=name, prefix=prefix or DEFAULT_PREFIX, rdma_hca_max=hca_max, selectors=selectors)

    def config(self, data: object) -> RdmaConfig:
        if not isinstance(data, dict):
            raise RdmaConfigError(f"{self.source}: expected a JSON object, got {type(data).__name__}")
        self.unknown(data, _TOP_KEYS, "")
        interval = data.get("periodicUpdateInterval")
        seconds = (
            DEFAULT_INTERVAL_SECONDS
            if interval is None
            else self.integer(interval, "periodicUpdateInterval", maximum=MAX_INTERVAL_SECONDS)
        )
        entries = data.get("configList")
        if not isinstance(entries, list) or not entries:
            raise self.error("configList", "expected a non-empty list of resources")
        if len(entries) > MAX_RESOURCES:
            raise self.error("configList", f"at most {MAX_RESOURCES} resources, got {len(entries)}")
        resources: list[ResourceConfig] = []
        for i, entry in enumerate(entries):
            resource = self.resource(entry, f"configList[{i}]")
            for j, other in enumerate(resources):
                if other.name == resource.name:
                    raise self.error(
                        f"configList[{i}].resourceName", f"{resource.name!r} is already used by configList[{j}]"
                    )
            resources.append(resource)
        return RdmaConfig(resources=tuple(resources), periodic_update_seconds=seconds, warnings=tuple(self.warnings))


def parse_config(text: str, *, source: str) -> RdmaConfig:
    """Parse the file's ``text``; ``source`` is the name errors start with."""
    return _Parser(source).config(load_json(text, source=source, error=RdmaConfigError))
