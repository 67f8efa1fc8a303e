"""mig-parted config v1: parsing with errors that name the entry, and the per-GPU plan for one named config.

Format (operands.md §6): ``version: v1`` and ``mig-configs`` mapping a name to a list of entries
``{device-filter, devices, mig-enabled, mig-devices}``. ``device-filter`` is a PCI ID
``0x<device><vendor>`` or a list of them (absent: every GPU); ``devices`` is ``all`` or a list of GPU
indices; ``mig-devices`` maps a profile to a count and is required (``{}`` allowed) when MIG is on,
empty when it is off. Unknown keys are errors. Entries apply in order; a later entry that selects a GPU
again replaces what an earlier one said for it.

Every mapping key must be a string (``1: x`` is refused, naming where), and every count is bounded before
anything is built from it: at most :data:`MAX_MIG_DEVICES` MIG devices per GPU in one entry (no GPU has
more than 8 compute slices, so no real config asks for more; the GPU itself refuses what does not fit
when applied), :data:`MAX_FILTERS` PCI IDs in ``device-filter``, :data:`MAX_DEVICES` entries in
``devices``, each an index below :data:`MAX_DEVICES`, :data:`MAX_ENTRIES` entries in a named config and
:data:`MAX_CONFIGS` named configs.

A profile ``<c>c.<g>g.<mem>gb`` counts compute instances of ``c`` slices in ``<g>g.<mem>gb`` GPU
instances (mig-parted packs as many into one GPU instance as fit); ``<g>c.<g>g...`` is the plain
``<g>g...`` profile and is stored under that name, so comparisons with the GPUs' state agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.agents.shared.configinput import ConfigRefusedError, check_string_keys, describe, one_line
from gpu_operator.api.yamltext import YamlError, load_one
from gpu_operator.gpu.mig import canonical_profile
from gpu_operator.gpu.types import Device

PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb((?:[+-][a-z]+(?:\.[a-z]+)*)*)$")
_PCI_ID = re.compile(r"^0x[0-9a-fA-F]{8}$")
_ENTRY_KEYS = frozenset({"device-filter", "devices", "mig-enabled", "mig-devices"})
MAX_MIG_DEVICES = 64
MAX_FILTERS = 64
MAX_DEVICES = 1024
MAX_ENTRIES = 256
MAX_CONFIGS = 4096


class MigConfigError(ConfigRefusedError):
    """The config file (or a named config in it) is not usable; the message says where and why."""


@dataclass(frozen=True, kw_only=True)
class Entry:
    device_filter: tuple[int, ...]  # PCI IDs (device << 16 | vendor); empty: any GPU
    devices: tuple[int, ...] | None  # None: all
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]


@dataclass(frozen=True, kw_only=True)
class Target:
    """What one GPU should look like: MIG mode and, with MIG on, the profiles of its MIG devices."""

    mig_enabled: bool
    profiles: tuple[str, ...] = ()


MigConfigs = dict[str, tuple[Entry, ...]]


def _entry(raw: Any, *, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise MigConfigError(f"{where}: an entry must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise MigConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if not isinstance(raw.get("mig-enabled"), bool):
        raise MigConfigError(f"{where}: mig-enabled is required and must be true or false")
    enabled: bool = raw["mig-enabled"]
    filters = raw.get("device-filter", [])
    filters = [filters] if isinstance(filters, str) else filters
    if not isinstance(filters, list) or not all(isinstance(f, str) and _PCI_ID.fullmatch(f) for f in filters):
        raise MigConfigError(f"{where}: device-filter must be a PCI ID like 0x20B010DE or a list of them")
    if len(filters) > MAX_FILTERS:
        raise MigConfigError(f"{where}: device-filter: at most {MAX_FILTERS} PCI IDs, got {len(filters)}")
    devices = raw.get("devices")
    if isinstance(devices, list) and len(devices) > MAX_DEVICES:
        raise MigConfigError(f"{where}: devices: at most {MAX_DEVICES} GPU indices, got {len(devices)}")
    if devices != "all" and not (
        isinstance(devices, list) and all(type(d) is int and 0 <= d < MAX_DEVICES for d in devices)
    ):
        raise MigConfigError(f"{where}: devices must be 'all' or a list of GPU indices (0 to {MAX_DEVICES - 1})")
    mig = raw.get("mig-devices")
    if enabled and mig is None:
        raise MigConfigError(f"{where}: mig-devices is required when mig-enabled is true ({{}} for none)")
    mig = mig or {}
    if not isinstance(mig, dict):
        raise MigConfigError(f"{where}: mig-devices must map a profile to a count")
    if not enabled and mig:
        raise MigConfigError(f"{where}: mig-devices must be empty when mig-enabled is false")
    counts: dict[str, int] = {}
    for profile, count in mig.items():
        if not isinstance(profile, str) or not (match := PROFILE.fullmatch(profile)):
            shown = repr(profile[:60]) if isinstance(profile, str) else describe(profile)
            raise MigConfigError(f"{where}: {shown} is not a MIG profile (like 1g.10gb or 1c.2g.20gb)")
        if match.group(1) and int(match.group(1)) > int(match.group(2)):
            raise MigConfigError(f"{where}: {profile}: a compute instance cannot be larger than its GPU instance")
        if type(count) is not int or not 0 <= count <= MAX_MIG_DEVICES:
            raise MigConfigError(
                f"{where}: mig-devices.{profile}: the count must be a whole number from 0 to {MAX_MIG_DEVICES} "
                f"(MIG devices per GPU), got {describe(count)}"
            )
        name = canonical_profile(profile)
        counts[name] = counts.get(name, 0) + count
    if sum(counts.values()) > MAX_MIG_DEVICES:
        raise MigConfigError(
            f"{where}: mig-devices: {sum(counts.values())} MIG devices in all; at most {MAX_MIG_DEVICES} per GPU"
        )
    return Entry(
        device_filter=tuple(int(f, 16) for f in filters),
        devices=None if devices == "all" else tuple(devices),
        mig_enabled=enabled,
        mig_devices=tuple(counts.items()),
    )


def parse(data: Any, *, source: str = "config") -> MigConfigs:
    """The named configs in parsed YAML ``data`` (MigConfigError naming ``source`` and the entry)."""
    if not isinstance(data, dict):
        raise MigConfigError(f"{source}: the top level must be a mapping")
    # Keys that are not strings (YAML's ``1: x``) would otherwise fail deep in sorting and joining.
    check_string_keys(data, source=source, error=MigConfigError)
    unknown = sorted(set(data) - {"version", "mig-configs"})
    if unknown:
        raise MigConfigError(f"{source}: unknown key(s) {', '.join(unknown)}")
    if data.get("version") != "v1":
        raise MigConfigError(f"{source}: version must be v1, got {describe(data.get('version'))}")
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigConfigError(f"{source}: mig-configs must name at least one config")
    if len(configs) > MAX_CONFIGS:
        raise MigConfigError(f"{source}: mig-configs: at most {MAX_CONFIGS} named configs, got {len(configs)}")
    out: MigConfigs = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise MigConfigError(f"{source}: mig-configs.{name} must be a non-empty list of entries")
        if len(entries) > MAX_ENTRIES:
            raise MigConfigError(f"{source}: mig-configs.{name}: at most {MAX_ENTRIES} entries, got {len(entries)}")
        out[str(name)] = tuple(_entry(e, where=f"{source}: mig-configs.{name}[{i}]") for i, e in enumerate(entries))
    return out


def load(text: str, *, source: str) -> MigConfigs:
    try:
        data = load_one(text, source=source)
    except YamlError as error:
        raise MigConfigError(one_line(str(error), limit=500)) from error  # PyYAML's messages span lines
    return parse(data, source=source)


def plan(configs: Mapping[str, Sequence[Entry]], *, name: str, devices: Sequence[Device]) -> dict[int, Target]:
    """GPU index -> Target for config ``name`` (GPUs no entry selects are left out: left as they are)."""
    if name not in configs:
        known = ", ".join(sorted(configs)) if len(configs) <= 12 else f"{len(configs)} names"
        raise MigConfigError(f"no MIG config named {name!r} (known: {known})")
    targets: dict[int, Target] = {}
    for entry in configs[name]:
        for device in devices:
            if entry.device_filter and device.pci_device_id not in entry.device_filter:
                continue
            if entry.devices is not None and device.index not in entry.devices:
                continue
            profiles = tuple(p for p, count in entry.mig_devices for _ in range(count))
            targets[device.index] = Target(mig_enabled=entry.mig_enabled, profiles=profiles)
    return targets
