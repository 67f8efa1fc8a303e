"""The SR-IOV device plugin's config file on the node: read it, parse it with the one parser.

The format, its checks and its bounds are :mod:`gpu_operator.api.network.sriovconfig`, which the
NicClusterPolicy model uses on the config it embeds too; this module reads the file the plugin is
given and re-exports the parser's names for the plugin's modules.
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.shared.configinput import read_text
from gpu_operator.api.network.sriovconfig import (
    DEFAULT_CONFIG,
    DEFAULT_PREFIX,
    DEVICE_TYPES,
    MAX_LIST_ITEMS,
    MAX_RESOURCES,
    MAX_SELECTORS,
    MAX_VF_INDEX,
    NET_DEVICE,
    Config,
    ConfigError,
    ResourceConfig,
    Selector,
    parse_config,
    parse_vf_range,
)

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_PREFIX",
    "DEVICE_TYPES",
    "MAX_LIST_ITEMS",
    "MAX_RESOURCES",
    "MAX_SELECTORS",
    "MAX_VF_INDEX",
    "NET_DEVICE",
    "Config",
    "ConfigError",
    "ResourceConfig",
    "Selector",
    "load_config",
    "parse_config",
    "parse_vf_range",
]


def load_config(path: Path, *, source: str | None = None, default_prefix: str = DEFAULT_PREFIX) -> Config:
    """Read and parse ``path``; ``source`` (default: the path) names it in messages."""
    name = source or str(path)
    return parse_config(read_text(path, source=name, error=ConfigError), source=name, default_prefix=default_prefix)
