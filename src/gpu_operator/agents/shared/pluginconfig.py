"""The device plugin's config file (format v1, read too by feature discovery and the MPS agent) and its settings.

``load_config`` parses YAML or JSON into :class:`ConfigFile` and refuses anything doubtful with an
error naming the file and field: unknown keys, replicas below 2, both sharing modes at once, MPS with
mixed MIG, resource names that are not ``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``, text that is
not UTF-8. Counts are bounded before anything is built from them: ``replicas`` at most
:data:`MAX_REPLICAS` per GPU (upstream sets no bound; every replica becomes a device the kubelet
tracks), at most :data:`MAX_SHARED_RESOURCES` sharing rules and :data:`MAX_DEVICE_SELECTORS` entries in
a rule's ``devices``. Upstream ignores several of these silently; we do not. ``Settings.resolve`` applies the precedence
command line > environment > config file > default. Next: ``resources`` turns settings and devices
into advertised resources; ``nodeconfig`` picks the config file of a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe, one_line, read_text
from gpu_operator.api.yamltext import YamlError, load_one

MigStrategy = Literal["none", "single", "mixed"]
ListStrategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
RESOURCE_NAME = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb(\.[a-z+]+)?)$")
#: Replicas of one GPU: each is a device the plugin lists and the kubelet keeps, so one huge value
#: would build millions before anything could refuse it. 1024 is far above any real sharing.
MAX_REPLICAS = 1024
#: Sharing rules in one config and entries in one rule's ``devices`` (GPU indices or UUIDs).
MAX_SHARED_RESOURCES = 64
MAX_DEVICE_SELECTORS = 1024


class ConfigError(ConfigRefusedError):
    """A config file that cannot be used; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=True)


class PluginFlags(_Model):
    pass_device_specs: bool | None = None
    device_list_strategy: ListStrategy | list[ListStrategy] | None = None
    device_id_strategy: Literal["uuid", "index"] | None = Field(default=None, alias="deviceIDStrategy")
    cdi_annotation_prefix: str | None = None
    nvidia_ctk_path: str | None = Field(default=None, alias="nvidiaCTKPath")
    container_driver_root: str | None = None
    shared_devices_allocation_policy: Literal["distributed", "packed"] | None = None


class GfdFlags(_Model):
    oneshot: bool | None = None
    no_timestamp: bool | None = None
    sleep_interval: str | None = Field(default=None, pattern=r"^(infinite|([0-9]+(ms|s|m|h))+)$")
    output_file: str | None = None
    machine_type_file: str | None = None


class Flags(_Model):
    mig_strategy: MigStrategy | None = None
    fail_on_init_error: bool | None = None
    nvidia_driver_root: str | None = None
    nvidia_dev_root: str | None = None
    mps_root: str | None = None
    gdrcopy_enabled: bool | None = None
    gds_enabled: bool | None = None
    mofed_enabled: bool | None = None
    device_discovery_strategy: Literal["auto", "nvml", "tegra"] | None = None
    use_node_feature_api: bool | None = Field(default=None, alias="useNodeFeatureAPI")
    plugin: PluginFlags | None = None
    gfd: GfdFlags | None = None


class SharedResource(_Model):
    name: str
    replicas: int
    rename: str | None = None
    devices: Literal["all"] | list[int | str] = "all"

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if not 2 <= value <= MAX_REPLICAS:
            raise ValueError(f"must be from 2 to {MAX_REPLICAS} (replicas per GPU), got {describe(value)}")
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: Literal["all"] | list[int | str]) -> Literal["all"] | list[int | str]:
        if isinstance(value, list) and len(value) > MAX_DEVICE_SELECTORS:
            raise ValueError(f"at most {MAX_DEVICE_SELECTORS} entries, got {len(value)}")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > 63 or not RESOURCE_NAME.fullmatch(value):
            raise ValueError(f"must be nvidia.com/gpu or nvidia.com/mig-<profile> (got {describe(value)})")
        return value


class Sharing(_Model):
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool | None = None
    resources: list[SharedResource] = Field(min_length=1, max_length=MAX_SHARED_RESOURCES)


class SharingSection(_Model):
    time_slicing: Sharing | None = None
    mps: Sharing | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> SharingSection:
        if self.time_slicing is not None and self.mps is not None:
            raise ValueError("timeSlicing and mps are mutually exclusive: configure one sharing mode")
        return self


class Imex(_Model):
    channel_ids: list[Literal[0]] = Field(default_factory=list, alias="channelIDs")
    required: bool = False


class ResourcePattern(_Model):
    pattern: str
    name: str


class Resources(_Model):
    gpus: list[ResourcePattern] | None = None
    mig: list[ResourcePattern] | None = None


class ConfigFile(_Model):
    """A device plugin / feature discovery config file (version v1)."""

    version: Literal["v1", ""] = "v1"
    flags: Flags = Field(default_factory=Flags)
    resources: Resources | None = None
    sharing: SharingSection | None = None
    imex: Imex | None = None

    @model_validator(mode="after")
    def _mps_rules(self) -> ConfigFile:
        if self.sharing and self.sharing.mps and self.flags.mig_strategy == "mixed":
            raise ValueError("sharing.mps cannot be used with flags.migStrategy=mixed")
        return self


def parse_config(*, text: str, source: str) -> ConfigFile:
    """Parse config text (YAML or JSON); ``source`` names it in errors."""
    try:
        data = load_one(text, source=source)
    except YamlError as exc:
        raise ConfigError(one_line(str(exc), limit=500)) from exc  # PyYAML's messages span lines
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping")
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            path = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "literal[")))
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{path}: {msg}" if path else msg)
        raise ConfigError(f"{source}: " + "; ".join(lines)) from exc


def load_config(path: Path) -> ConfigFile:
    """Read and parse a config file (one that is not UTF-8 text is refused like any bad one)."""
    return parse_config(text=read_text(path, source=str(path), error=ConfigError), source=str(path))


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the plugin acts on, after precedence is applied."""

    mig_strategy: MigStrategy = "none"
    fail_on_init_error: bool = True
    pass_device_specs: bool = False
    device_list_strategy: tuple[ListStrategy, ...] = ("envvar",)
    device_id_strategy: Literal["uuid", "index"] = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    driver_root: str = "/"
    dev_root: str = "/"
    mps_root: str = ""
    gdrcopy_enabled: bool = False
    gds_enabled: bool = False
    mofed_enabled: bool = False
    allocation_policy: Literal["distributed", "packed"] = "distributed"
    sharing_mode: Literal["none", "time-slicing", "mps"] = "none"
    sharing: Sharing | None = None

    @staticmethod
    def resolve(
        *, config: ConfigFile | None, env: Mapping[str, str], overrides: Mapping[str, Any] | None = None
    ) -> Settings:
        """Command line (``overrides``) > environment > config file > default."""
        cfg = config or ConfigFile()
        flags, plugin = cfg.flags, cfg.flags.plugin or PluginFlags()
        values: dict[str, Any] = {}

        def pick(key: str, env_name: str, file_value: Any, convert: Any = str) -> None:
            if overrides and overrides.get(key) is not None:
                values[key] = overrides[key]
            elif env.get(env_name, "") != "":
                values[key] = convert(env[env_name])
            elif file_value is not None:
                values[key] = file_value

        def boolean(raw: str) -> bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")

        def strategies(raw: Any) -> tuple[str, ...]:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(s.strip() for s in items if s.strip())

        pick("mig_strategy", "MIG_STRATEGY", flags.mig_strategy)
        pick("fail_on_init_error", "FAIL_ON_INIT_ERROR", flags.fail_on_init_error, boolean)
        pick("pass_device_specs", "PASS_DEVICE_SPECS", plugin.pass_device_specs, boolean)
        pick("device_list_strategy", "DEVICE_LIST_STRATEGY", plugin.device_list_strategy, strategies)
        pick("device_id_strategy", "DEVICE_ID_STRATEGY", plugin.device_id_strategy)
        pick("cdi_annotation_prefix", "CDI_ANNOTATION_PREFIX", plugin.cdi_annotation_prefix)
        pick("driver_root", "NVIDIA_DRIVER_ROOT", flags.nvidia_driver_root)
        pick("dev_root", "NVIDIA_DEV_ROOT", flags.nvidia_dev_root)
        pick("mps_root", "MPS_ROOT", flags.mps_root)
        pick("gdrcopy_enabled", "GDRCOPY_ENABLED", flags.gdrcopy_enabled, boolean)
        pick("gds_enabled", "GDS_ENABLED", flags.gds_enabled, boolean)
        pick("mofed_enabled", "MOFED_ENABLED", flags.mofed_enabled, boolean)
        pick(
            "allocation_policy",
            "SHARED_DEVICES_ALLOCATION_POLICY",
            plugin.shared_devices_allocation_policy,
        )
        if "device_list_strategy" in values:
            values["device_list_strategy"] = strategies(values["device_list_strategy"])
        if "dev_root" not in values and "driver_root" in values:
            values["dev_root"] = values["driver_root"]
        if cfg.sharing and cfg.sharing.mps:
            values["sharing_mode"], values["sharing"] = "mps", cfg.sharing.mps
        elif cfg.sharing and cfg.sharing.time_slicing:
            values["sharing_mode"], values["sharing"] = "time-slicing", cfg.sharing.time_slicing
        settings = Settings(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """Cross-source rules, checked after precedence (a flag can make a file's choice invalid)."""
        allowed = {"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"}
        bad = [s for s in self.device_list_strategy if s not in allowed]
        if bad or not self.device_list_strategy:
            raise ConfigError(f"deviceListStrategy: unknown strategy {bad or '(empty)'}; use {sorted(allowed)}")
        if self.mig_strategy not in ("none", "single", "mixed"):
            raise ConfigError(f"migStrategy: must be none, single or mixed (got {describe(self.mig_strategy)})")
        # The environment bypasses the file's model: its values are checked here, naming the variable too.
        if self.device_id_strategy not in ("uuid", "index"):
            raise ConfigError(
                "deviceIDStrategy (DEVICE_ID_STRATEGY): must be uuid or index "
                f"(got {describe(self.device_id_strategy)})"
            )
        if self.allocation_policy not in ("distributed", "packed"):
            raise ConfigError(
                "sharedDevicesAllocationPolicy (SHARED_DEVICES_ALLOCATION_POLICY): must be distributed or packed "
                f"(got {describe(self.allocation_policy)})"
            )
        if self.sharing_mode == "mps" and not self.mps_root:
            raise ConfigError("sharing.mps needs flags.mpsRoot (or MPS_ROOT)")
        if self.sharing_mode == "mps" and self.mig_strategy == "mixed":
            raise ConfigError("sharing.mps cannot be used with migStrategy=mixed")

    @property
    def fail_requests_greater_than_one(self) -> bool:
        """Upstream default: true for MPS, false for time-slicing."""
        if self.sharing is None:
            return False
        if self.sharing.fail_requests_greater_than_one is not None:
            return self.sharing.fail_requests_greater_than_one
        return self.sharing_mode == "mps"
