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
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.agents.gfd.labels import NodeView, compute_labels, stale_keys
from gpu_operator.agents.gfd.nodefeature import NodeFeatureAccess, node_feature, use_node_feature_api
from gpu_operator.agents.gfd.vgpu import VgpuInfo, read_vgpu
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import read_small_file
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import ConfigError, Settings
from gpu_operator.api.envtext import env_duration, env_flag, env_path, env_text
from gpu_operator.gpu.backend import GpuBackend, GpuError
from gpu_operator.runtime.loop import LoopStats
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
DEFAULT_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
PCI_DEVICES = "/sys/bus/pci/devices"  # read for the vGPU labels, as upstream
MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"


MAX_MACHINE_BYTES = 4096  # a DMI product name is a few dozen bytes; a larger "file" is not one
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_INTERVAL_MIN, _INTERVAL_MAX = 0.1, 86400.0


def parse_interval(text: str) -> float | None:
    """Seconds from ``60s``/``5m``/``1h30m`` (100ms to 24h); None for ``infinite``."""
    return env_duration(
        {"GFD_SLEEP_INTERVAL": text},
        "GFD_SLEEP_INTERVAL",
        default=60.0,
        minimum=_INTERVAL_MIN,
        maximum=_INTERVAL_MAX,
        bare_seconds=False,
        special={"infinite": None},
    )


@dataclass(frozen=True, kw_only=True)
class GfdSettings:
    """GFD's environment, read and checked once at start (a bad value stops it with one line)."""

    interval: float | None = 60.0  # None: ``infinite``, one round
    oneshot: bool = False
    no_timestamp: bool = False
    label_node: bool = False
    node_feature_api: bool = False
    output: str = DEFAULT_OUTPUT  # "": no feature file
    machine_file: str = MACHINE_TYPE_FILE
    pci_devices: str = PCI_DEVICES
    namespace: str = "default"


def settings_from_env(env: Mapping[str, str]) -> GfdSettings:
    """:class:`GfdSettings` from ``env``; ConfigRefusedError naming the variable for a bad value."""
    namespace_var = "NAMESPACE" if env.get("NAMESPACE", "").strip() else "OPERATOR_NAMESPACE"
    # GFD_OUTPUT_FILE set to "" turns the feature file off (the operator renders it so with GFD_LABEL_NODE).
    output = "" if env.get("GFD_OUTPUT_FILE") == "" else env_path(env, "GFD_OUTPUT_FILE", default=DEFAULT_OUTPUT)
    return GfdSettings(
        interval=parse_interval(env.get("GFD_SLEEP_INTERVAL", "")),
        oneshot=env_flag(env, "GFD_ONESHOT", default=False),
        no_timestamp=env_flag(env, "GFD_NO_TIMESTAMP", default=False),
        label_node=env_flag(env, "GFD_LABEL_NODE", default=False),
        node_feature_api=use_node_feature_api(env),
        output=output,
        machine_file=env_path(env, "GFD_MACHINE_TYPE_FILE", default=MACHINE_TYPE_FILE),
        pci_devices=env_path(env, "GFD_PCI_DEVICES_DIR", default=PCI_DEVICES),
        namespace=env_text(
            env, namespace_var, default="default", pattern=_NAMESPACE, what="a namespace name", limit=63
        ),
    )


def read_machine_type(path: Path) -> str:
    """The first line of the DMI product name file; ``unknown`` when it is missing or not a regular file
    (a FIFO would block the read). Its bytes are the firmware's: undecodable ones are replaced, not fatal."""
    data = read_small_file(path, limit=MAX_MACHINE_BYTES)
    text = (data or b"").decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip() if text else "unknown"


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


async def publish_once(
    ctx: AgentContext, *, configs: NamedConfigs, options: GfdSettings | None = None
) -> dict[str, str]:
    """Compute the labels and write them everywhere configured; returns them."""
    gfd = settings_from_env(ctx.env) if options is None else options
    settings = await configs.settings()
    machine = await asyncio.to_thread(read_machine_type, ctx.path(gfd.machine_file))
    stamp = None if gfd.no_timestamp else int(time.time())
    vgpu = await asyncio.to_thread(read_vgpu, ctx.path(gfd.pci_devices))
    view = await asyncio.to_thread(
        node_view, backend=ctx.gpu, settings=settings, machine=machine, timestamp=stamp, vgpu=vgpu
    )
    labels = compute_labels(view)
    if gfd.node_feature_api:
        if not isinstance(ctx.node, NodeFeatureAccess):
            raise ConfigError("GFD_USE_NODE_FEATURE_API is set but this context cannot write NodeFeature objects")
        body = node_feature(node=ctx.node_name, namespace=gfd.namespace, labels=_without_timestamp(labels))
        if body != configs.last_feature:  # written only when the labels change
            await ctx.node.apply_node_feature(body)
            configs.last_feature = body
        return labels
    if gfd.output:
        await asyncio.to_thread(write_feature_file, ctx.path(gfd.output), labels)
    if gfd.label_node and ctx.node is not None:
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
    gfd = settings_from_env(ctx.env)  # before anything runs: a bad value stops GFD with one line
    configs = NamedConfigs(ctx)

    async def round_() -> None:
        try:
            labels = await publish_once(ctx, configs=configs, options=gfd)
        except (ConfigError, GpuError) as exc:  # the administrator's or the GPU's problem: said, not retried
            log.error("gfd[%s]: labels not updated: %s", ctx.node_name, exc)
            return
        ctx.set_ready(True)
        log.debug("gfd[%s]: %d labels", ctx.node_name, len(labels))

    # Anything else (the API unreachable, slow, 429, 500) is retried by the runtime, sooner than the interval.
    return await every(name=f"gfd[{ctx.node_name}]", seconds=None if gfd.oneshot else gfd.interval, work=round_,
                       sleep=ctx.sleep)  # fmt: skip
