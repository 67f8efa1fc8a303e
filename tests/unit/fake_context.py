"""An AgentContext for unit tests: paths under a temporary root, labels in a dict."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.gpu.backend import GpuBackend


@dataclass
class FakeNode:
    values: dict[str, str] = field(default_factory=dict)
    patches: int = 0
    features: list[dict[str, Any]] = field(default_factory=list)

    async def apply_node_feature(self, body: Mapping[str, Any]) -> None:
        self.features.append(dict(body))

    async def labels(self) -> dict[str, str]:
        return dict(self.values)

    async def patch_labels(self, changes: Mapping[str, str | None]) -> None:
        self.patches += 1
        for key, value in changes.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = value


@dataclass
class FakeContext:
    root: Path
    gpu: GpuBackend
    env: dict[str, str] = field(default_factory=dict)
    node_name: str = "node-a"
    node: FakeNode | None = field(default_factory=FakeNode)
    ready: bool = False
    stop_after: int = 1_000_000

    @property
    def plugin_dir(self) -> Path:
        return self.root / "var/lib/kubelet/device-plugins"

    def path(self, container_path: str) -> Path:
        return self.root / "container" / container_path.lstrip("/")

    def host_path(self, node_path: str) -> Path:
        return self.root / "host" / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.ready = ready

    async def sleep(self, seconds: float | None) -> bool:
        self.stop_after -= 1
        await asyncio.sleep(0)
        return self.stop_after <= 0
