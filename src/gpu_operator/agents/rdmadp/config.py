"""The RDMA shared device plugin's config file on the node: read it, parse it with the one parser.

The format, its checks and its bounds are :mod:`gpu_operator.api.network.rdmaconfig`, which the
NicClusterPolicy model uses on the config it embeds too; this module reads the file the plugin is
given and re-exports the parser's names for the plugin's modules.
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.shared.configinput import read_text
from gpu_operator.api.network.rdmaconfig import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_PREFIX,
    MAX_HCA,
    MAX_INTERVAL_SECONDS,
    MAX_RESOURCES,
    MAX_SELECTOR_ITEMS,
    RdmaConfig,
    RdmaConfigError,
    ResourceConfig,
    Selectors,
    parse_config,
)

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "DEFAULT_PREFIX",
    "MAX_HCA",
    "MAX_INTERVAL_SECONDS",
    "MAX_RESOURCES",
    "MAX_SELECTOR_ITEMS",
    "RdmaConfig",
    "RdmaConfigError",
    "ResourceConfig",
    "Selectors",
    "load_config",
    "parse_config",
]


def load_config(path: Path, *, source: str | None = None) -> RdmaConfig:
    """Read and parse ``path`` (errors name ``source``, by default the path)."""
    name = source or str(path)
    if not path.exists():
        raise RdmaConfigError(f"{name}: no such file (mount the plugin's config there)")
    return parse_config(read_text(path, source=name, error=RdmaConfigError), source=name)
