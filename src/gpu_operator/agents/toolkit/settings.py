"""What the toolkit agent configures, from its environment (upstream's variable names), and the
RuntimeClasses that go with the runtime handlers.

Paths are host paths: the agent reaches them through ``ctx.host_path`` and writes them, unchanged, into
the runtime's config. ``K8S_DISTRIBUTION=k3s|rke2`` switches the defaults to the locations those
distributions use (a ``config.toml.tmpl`` template and their own containerd socket); explicit
``CONTAINERD_CONFIG``/``RUNTIME_CONFIG`` and socket variables still win.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

from gpu_operator.agents.shared import shellquote
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.toolkit.containerd import Runtime

RUNTIMES = ("containerd", "crio", "docker")
RESTART_MODES = ("signal", "systemd", "none")
DEFAULT_ROOT = "/usr/local/nvidia"
DEFAULT_CDI_DIR = "/var/run/cdi"
_DEFAULTS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "containerd": {
            "config": "/etc/containerd/config.toml",
            "socket": "/run/containerd/containerd.sock",
            "restart": "signal",
            "unit": "containerd",
        },
        "crio": {
            "config": "/etc/crio/crio.conf",
            "drop_in": "/etc/crio/crio.conf.d/99-nvidia.conf",
            "socket": "/var/run/crio/crio.sock",
            "restart": "systemd",
            "unit": "crio",
        },
        "docker": {"config": "/etc/docker/daemon.json", "socket": "/var/run/docker.sock", "restart": "signal"},
    }
)
_DISTRIBUTIONS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "k3s": {
            "config": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
            "socket": "/run/k3s/containerd/containerd.sock",
        },
        "rke2": {
            "config": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
            "socket": "/run/k3s/containerd/containerd.sock",
        },
    }
)
_TEMPLATE_V3 = re.compile(r"-v3\.toml\.tmpl$")
_UNIT = re.compile(r"[A-Za-z0-9_:@.\\][A-Za-z0-9_:@.\\-]{0,255}")  # systemd.unit(5), no leading '-'


class SettingsError(ConfigRefusedError):
    """An environment variable holds a value the toolkit cannot use (the message names it)."""


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        if name in env:
            return env[name]
    return None


def _flag(env: Mapping[str, str], *names: str, default: bool) -> bool:
    value = _first(env, *names)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    given = next(name for name in names if name in env)  # the variable the pod set, not the first alias
    raise SettingsError(f"{given}: expected true or false, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ToolkitSettings:
    runtime: str
    config: str
    drop_in: str | None  # None: edit the main config in place
    # "always", or "if-imported": only when the main config's imports already cover ``drop_in``
    drop_in_mode: str
    socket: str
    restart_mode: str
    systemd_unit: str
    root: str  # install root; the executables go to <root>/toolkit
    runtime_name: str
    set_as_default: bool
    enable_cdi: bool
    cdi_dir: str
    driver_root: str
    dev_root: str
    low_level_runtimes: tuple[str, ...] = ("runc", "crun")
    hook_log: str = ""  # hooks append their argv and environment variable names here (debugging)

    @property
    def toolkit_dir(self) -> str:
        return str(PurePosixPath(self.root) / "toolkit")

    @property
    def template_version(self) -> int | None:
        """For k3s/RKE2 templates: the containerd config version the template renders."""
        if self.runtime != "containerd" or not self.config.endswith(".tmpl"):
            return None
        return 3 if _TEMPLATE_V3.search(self.config) else 2

    def runtimes(self) -> tuple[Runtime, ...]:
        """``nvidia`` (the default mode), ``nvidia-cdi`` and ``nvidia-legacy``, named after ``runtime_name``."""
        base = str(PurePosixPath(self.toolkit_dir) / "nvidia-container-runtime")
        return (
            Runtime(name=self.runtime_name, binary=base),
            Runtime(name=f"{self.runtime_name}-cdi", binary=f"{base}.cdi"),
            Runtime(name=f"{self.runtime_name}-legacy", binary=f"{base}.legacy"),
        )

    @property
    def default_runtime(self) -> str | None:
        return self.runtime_name if self.set_as_default else None


#: Variables whose values the toolkit writes into the scripts it installs on the host.
_SCRIPT_VALUES = ("ROOT", "CDI_SPEC_DIR", "NVIDIA_CONTAINER_RUNTIME_RUNTIMES", "NVIDIA_CDI_HOOK_LOG")
#: Variables whose values become the hook's library folders, which ld.so.conf.d lists one per line.
_LINE_VALUES = ("NVIDIA_DRIVER_ROOT", "DRIVER_ROOT", "NVIDIA_DEV_ROOT", "DEV_ROOT")


def _check_script_values(env: Mapping[str, str]) -> None:
    """Refuse, naming the variable, a value that no shell script can carry (quoting handles the rest)."""
    for name in (*_SCRIPT_VALUES, *_LINE_VALUES):
        if name in env:
            try:
                shellquote.check_value(env[name], field=name)
            except shellquote.ShellValueError as error:
                raise SettingsError(str(error)) from error
    for name in _LINE_VALUES:
        if "\n" in env.get(name, ""):
            raise SettingsError(f"{name}: {env[name]!r} holds a newline (library folders are listed one per line)")
    # The wrapper hands the CDI directories to the modifier as one ':'-separated list.
    if ":" in env.get("CDI_SPEC_DIR", ""):
        raise SettingsError(f"CDI_SPEC_DIR: {env['CDI_SPEC_DIR']!r} must not contain ':' (it separates directories)")


def settings_from_env(env: Mapping[str, str]) -> ToolkitSettings:
    """The settings for ``env`` (SettingsError naming the variable when one is unusable)."""
    _check_script_values(env)
    runtime = (env.get("RUNTIME") or "containerd").strip()
    if runtime not in RUNTIMES:
        raise SettingsError(f"RUNTIME: expected one of {', '.join(RUNTIMES)}, got {runtime!r}")
    defaults = dict(_DEFAULTS[runtime])
    distribution = (env.get("K8S_DISTRIBUTION") or "").strip()
    if distribution:
        if distribution not in _DISTRIBUTIONS:
            raise SettingsError(f"K8S_DISTRIBUTION: expected k3s or rke2, got {distribution!r}")
        if runtime != "containerd":
            raise SettingsError(f"K8S_DISTRIBUTION={distribution} needs RUNTIME=containerd, got {runtime!r}")
        defaults.update(_DISTRIBUTIONS[distribution])
    prefix = runtime.upper() if runtime != "crio" else "CRIO"
    config = _first(env, "RUNTIME_CONFIG", f"{prefix}_CONFIG") or defaults["config"]
    drop_in_value = _first(env, "RUNTIME_DROP_IN_CONFIG")
    drop_in, mode = drop_in_value or None, "always"
    if drop_in_value is None and runtime == "crio":
        drop_in = defaults["drop_in"]
    elif drop_in_value is None and runtime == "containerd":
        # Unasked, a drop-in is used only where the admin already set up conf.d imports.
        drop_in, mode = str(PurePosixPath(config).parent / "conf.d" / "99-nvidia.toml"), "if-imported"
    if config.endswith(".tmpl") or runtime == "docker":
        drop_in = None  # templates are edited in place; Docker has no drop-in directory
    restart = _first(env, "RUNTIME_RESTART_MODE", f"{prefix}_RESTART_MODE") or defaults["restart"]
    if restart not in RESTART_MODES:
        raise SettingsError(f"RUNTIME_RESTART_MODE: expected one of {', '.join(RESTART_MODES)}, got {restart!r}")
    cdi = _flag(env, "RUNTIME_ENABLE_CDI", "CDI_ENABLED", default=False)
    name = _first(env, "NVIDIA_RUNTIME_NAME", f"{prefix}_RUNTIME_CLASS", f"{prefix}_RUNTIME_NAME") or "nvidia"
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
        raise SettingsError(f"NVIDIA_RUNTIME_NAME: not a valid runtime handler name: {name!r}")
    # With CDI the operator keeps runc the default and pods opt in through the RuntimeClass.
    default = _flag(env, "NVIDIA_RUNTIME_SET_AS_DEFAULT", f"{prefix}_SET_AS_DEFAULT", default=not cdi)
    low_level = tuple(x for x in (env.get("NVIDIA_CONTAINER_RUNTIME_RUNTIMES") or "runc,crun").split(",") if x)
    unit = env.get("RUNTIME_SYSTEMD_UNIT") or defaults.get("unit", runtime)
    # Handed to systemctl as an argument: a leading '-' would be read as an option.
    if not _UNIT.fullmatch(unit):
        raise SettingsError(f"RUNTIME_SYSTEMD_UNIT: not a valid systemd unit name: {unit!r}")
    return ToolkitSettings(
        runtime=runtime,
        config=config,
        drop_in=drop_in,
        drop_in_mode=mode,
        socket=_first(env, "RUNTIME_SOCKET", f"{prefix}_SOCKET") or defaults["socket"],
        restart_mode=restart,
        systemd_unit=unit,
        root=env.get("ROOT") or DEFAULT_ROOT,
        runtime_name=name,
        set_as_default=default,
        enable_cdi=cdi,
        cdi_dir=env.get("CDI_SPEC_DIR") or DEFAULT_CDI_DIR,
        driver_root=env.get("NVIDIA_DRIVER_ROOT") or env.get("DRIVER_ROOT") or "/run/nvidia/driver",
        dev_root=env.get("NVIDIA_DEV_ROOT")
        or env.get("DEV_ROOT")
        or env.get("NVIDIA_DRIVER_ROOT")
        or "/run/nvidia/driver",
        low_level_runtimes=low_level,
        hook_log=env.get("NVIDIA_CDI_HOOK_LOG", ""),
    )


def runtime_classes(*, runtime_name: str = "nvidia", cdi_enabled: bool) -> list[dict[str, Any]]:
    """The RuntimeClasses for the handlers (``nvidia``; with CDI also ``nvidia-cdi`` and ``nvidia-legacy``)."""
    handlers = [runtime_name] + ([f"{runtime_name}-cdi", f"{runtime_name}-legacy"] if cdi_enabled else [])
    return [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": handler, "labels": {"app.kubernetes.io/component": "gpu-operator"}},
            "handler": handler,
        }
        for handler in handlers
    ]
