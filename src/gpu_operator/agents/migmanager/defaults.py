"""The default mig-parted config set, parsed (the data lives in ``gpu_operator.data.migconfigs``).

The renderer ships that document as the ``default-mig-parted-config`` ConfigMap; the MIG manager
parses the same document here, so a default config name that renders also applies.
"""

from __future__ import annotations

from gpu_operator.agents.migmanager.config import MigConfigs, parse
from gpu_operator.data.migconfigs import FAMILIES, config_name, default_document, default_yaml

__all__ = ["FAMILIES", "config_name", "default_configs", "default_document", "default_yaml"]


def default_configs() -> MigConfigs:
    return parse(default_document(), source="default mig-parted config")
