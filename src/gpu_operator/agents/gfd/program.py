"""``gpu-operator agent feature-discovery``: compute the GFD labels and publish them, in a loop.

Output, chosen by the environment: ``GFD_OUTPUT_FILE`` (an NFD local feature file, ``key=value``
lines, written atomically) and/or the Node's own labels when ``GFD_LABEL_NODE`` is true (used where
NFD is not installed; stale GFD labels are removed, other labels are never touched). With
``GFD_USE_NODE_FEATURE_API`` the labels go into an NFD NodeFeature object instead (``nodefeature``).
The interval is ``GFD_SLEEP_INTERVAL`` (``60s`` default, ``infinite`` = once); ``GFD_ONESHOT`` runs once.
The vGPU labels come from the PCI config spaces under ``GFD_PCI_DEVICES_DIR`` (``/sys/bus/pci/devices``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from gpu_operator.agents.gfd.labels import NodeView, compute_labels, stale_keys
from gpu_operator.agents.gfd.nodefeature import NodeFeatureAccess, node_feature, use_node_feature_api
from gpu_operator.agents.gfd.vgpu import VgpuInfo, read_vgpu
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.runtime.loop import LoopStats
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
DEFAULT_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
PCI_DEVICES = "/sys/bus/pci/devices"  # read for the vGPU labels, as upstream


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def parse_interval(text: str) -> float | None:
    """Seconds from ``60s``/``5m``/``1h30m``; None for ``infinite``."""
    if text.strip() == "infinite":
        return None
    parts = re.findall(r"(\d+)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"GFD_SLEEP_INTERVAL: not a duration: {text!r}")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(int(n) * scale[u] for n, u in parts)


def node_view(
    *, backend: GpuBackend, settings: Settings, machine: str, timestamp: int | None, vgpu: VgpuInfo | None = None
) -> NodeView:
    """What the labels depend on, read from the backend (MIG devices of MIG-enabled GPUs only)."""
    devices = list(backend.devices())
    mig = {d.index: list(backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
    sharing = settings.sharing
    replicas = max((r.replicas for r in sharing.resources), default=1) if sharing else 1
    return NodeView(
        devices=devices,
        mig=mig,
        driver_version=backend.driver_version(),
        cuda_version=backend.cuda_driver_version(),
        machine=machine,
        mig_strategy=settings.mig_strategy,
        sharing_mode=settings.sharing_mode,
        replicas=replicas,
        renamed=bool(sharing and sharing.rename_by_default),
        timestamp=timestamp,
        vgpu=vgpu,
    )


def write_feature_file(path: Path, labels: Mapping[str, str]) -> None:
    """Atomically replace the NFD feature file (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in sorted(labels.items())), encoding="utf-8")
    os.chmod(tmp, 0o644)
    tmp.replace(path)


def _without_timestamp(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "nvidia.com/gfd.timestamp"}


async def publish_once(ctx: AgentContext, *, configs: NamedConfigs) -> dict[str, str]:
    """Compute the labels and write them everywhere configured; returns them."""
    env = ctx.env
    settings = await configs.settings()
    machine_file = ctx.path(env.get("GFD_MACHINE_TYPE_FILE", "/sys/class/dmi/id/product_name"))
    machine = machine_file.read_text(encoding="utf-8").strip() if machine_file.exists() else "unknown"
    stamp = None if _true(env.get("GFD_NO_TIMESTAMP")) else int(time.time())
    vgpu = await asyncio.to_thread(read_vgpu, ctx.path(env.get("GFD_PCI_DEVICES_DIR", PCI_DEVICES)))
    view = await asyncio.to_thread(
        node_view, backend=ctx.gpu, settings=settings, machine=machine, timestamp=stamp, vgpu=vgpu
    )
    labels = compute_labels(view)
    if use_node_feature_api(env):
        if not isinstance(ctx.node, NodeFeatureAccess):
            raise ConfigError("GFD_USE_NODE_FEATURE_API is set but this context cannot write NodeFeature objects")
        namespace = env.get("NAMESPACE") or env.get("OPERATOR_NAMESPACE") or "default"
        body = node_feature(node=ctx.node_name, namespace=namespace, labels=_without_timestamp(labels))
        if body != configs.last_feature:  # written only when the labels change
            await ctx.node.apply_node_feature(body)
            configs.last_feature = body
        return labels
    output = env.get("GFD_OUTPUT_FILE", DEFAULT_OUTPUT)
    if output:
        await asyncio.to_thread(write_feature_file, ctx.path(output), labels)
    if _true(env.get("GFD_LABEL_NODE")) and ctx.node is not None:
        current = await ctx.node.labels()
        changes: dict[str, str | None] = {k: v for k, v in labels.items() if current.get(k) != v}
        # The timestamp alone changing is not worth a write on every pass at thousands of nodes.
        if set(changes) <= {"nvidia.com/gfd.timestamp"}:
            changes = {}
        changes |= dict.fromkeys(stale_keys(current=current, computed=labels))
        if changes:
            await ctx.node.patch_labels(changes)
    return labels


async def main(ctx: AgentContext) -> None:
    await run(ctx)


async def run(ctx: AgentContext) -> LoopStats:
    """Publish labels every interval until stopped (``GFD_ONESHOT``: until one round has run)."""
    configs = NamedConfigs(ctx)
    interval = parse_interval(ctx.env.get("GFD_SLEEP_INTERVAL", "60s"))
    oneshot = _true(ctx.env.get("GFD_ONESHOT"))

    async def round_() -> None:
        try:
            labels = await publish_once(ctx, configs=configs)
        except (ConfigError, GpuError) as exc:  # the administrator's or the GPU's problem: said, not retried
            log.error("gfd[%s]: labels not updated: %s", ctx.node_name, exc)
            return
        ctx.set_ready(True)
        log.debug("gfd[%s]: %d labels", ctx.node_name, len(labels))

    # Anything else (the API unreachable, slow, 429, 500) is retried by the runtime, sooner than the interval.
    return await every(name=f"gfd[{ctx.node_name}]", seconds=None if oneshot else interval, work=round_,
                       sleep=ctx.sleep)  # fmt: skip
