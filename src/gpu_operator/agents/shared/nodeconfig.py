"""Which device plugin config this node uses: :class:`NamedConfigs`, read by the device plugin, GFD and MPS.

Settings come from, in order: the command-line style overrides in the environment, ``CONFIG_FILE``
(a single config file) or, for per-node configuration, the directory of named configs
``CONFIG_FILE_SRCDIR`` (a mounted ConfigMap) with the key named by the node's
``nvidia.com/device-plugin.config`` label, falling back to ``DEFAULT_CONFIG`` (a key: a name with a
``/``, ``.`` or ``..`` is refused, naming the label). Both the label and
the files are re-read on every call, so a change reconfigures the agent without a pod restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.pluginconfig import ConfigError, ConfigFile, Settings, load_config
from gpu_operator.names import keys

CONFIG_LABEL = keys.DEVICE_PLUGIN_CONFIG


class NamedConfigs:
    """Picks the config file for this node from the environment, the mounted configs and the label."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.last_feature: dict[str, object] | None = None  # GFD's last NodeFeature, to skip no-op writes

    async def _selected(self) -> Path | None:
        env = self.ctx.env
        if env.get("CONFIG_FILE") and not env.get("CONFIG_FILE_SRCDIR"):
            return self.ctx.path(env["CONFIG_FILE"])
        srcdir = env.get("CONFIG_FILE_SRCDIR")
        if not srcdir:
            return None
        name = ""
        if self.ctx.node is not None:
            name = (await self.ctx.node.labels()).get(env.get("NODE_LABEL", CONFIG_LABEL), "")
        name = name or env.get("DEFAULT_CONFIG", "")
        if not name:
            return None
        if "/" in name or name in (".", ".."):  # a key of the ConfigMap, never a path out of its directory
            raise ConfigError(f"{CONFIG_LABEL}={name[:63]}: not a config name (a key of the ConfigMap in {srcdir})")
        path = self.ctx.path(srcdir) / name
        if not path.exists():
            raise ConfigError(f"{CONFIG_LABEL}={name}: no such config in {srcdir} (keys are the ConfigMap's data)")
        return path

    async def settings(self) -> Settings:
        path = await self._selected()
        config: ConfigFile | None = await asyncio.to_thread(load_config, path) if path else None
        return Settings.resolve(config=config, env=self.ctx.env)
