"""``gpu-operator agent driver-manager``: the init step of the driver DaemonSet (k8s-driver-manager's
``uninstall_driver``), making the node ready for a driver (re)install.

1. A driver installed on the host answers ``nvidia-smi``: label ``nvidia.com/gpu.deploy.driver=pre-installed``
   (the driver DaemonSet then leaves the node) and exit with an error after ``PREINSTALLED_WAIT_SECONDS``.
2. No NVIDIA module loaded: clean up what a previous driver left, restore operands, done -- after
   pausing the operands until their pods are gone when the last driver had another config digest
   (it unloaded itself on exit; what the operands built on it must start again on the new one).
3. Pause the operands (``paused-for-driver-upgrade``) and wait, bounded, for their pods to go.
4. Same ``DRIVER_CONFIG_DIGEST`` as the running driver's and no ``FORCE_REINSTALL``: keep the modules.
5. Otherwise cordon and evict GPU pods through the Eviction API (PodDisruptionBudgets hold), drain
   when that fails and ``ENABLE_AUTO_DRAIN`` is set, then unload the modules in upstream order
   (draining and retrying once when a module is busy and auto-drain is on), and unmount the old root.
6. Uncordon (only a cordon of ours) and restore the operand labels -- also on every failure.

Eviction and drain are skipped when the node carries ``nvidia.com/gpu-driver-upgrade-enabled=true``:
the upgrade controller has already moved the pods.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_operator.agents.drivermanager.eviction import EvictionError, EvictionOptions
from gpu_operator.agents.drivermanager.steps import (
    DriverManagerError,
    DriverManagerSettingsError,
    Steps,
    driver_host,
)
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import NodeCluster, cluster_of
from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe
from gpu_operator.agents.shared.operands import DRIVER_PAUSE, Clock
from gpu_operator.api.envtext import env_duration, env_flag, env_text, format_seconds
from gpu_operator.names import keys

log = logging.getLogger(__name__)
PREINSTALLED_LABEL = keys.DEPLOY_DRIVER
UPGRADE_ENABLED_ANNOTATION = keys.UPGRADE_ENABLED


_DAY = 86400.0
# A label key (optional DNS-subdomain prefix, name of up to 63 characters) and a label selector of
# such keys (``app=x,tier!=y``, ``!key``, ``key in (a,b)``): passed to the API server as they are.
_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]{0,315}[A-Za-z0-9])?"
_VALUE = r"[-A-Za-z0-9_.]{0,63}"
_REQUIREMENT = rf"(?:!?{_KEY}|{_KEY} *(?:=|==|!=) *{_VALUE}|{_KEY} +(?:in|notin) +\( *{_VALUE}(?: *, *{_VALUE})* *\))"
_LABEL_KEY = re.compile(_KEY)
_SELECTOR = re.compile(rf" *{_REQUIREMENT}(?: *, *{_REQUIREMENT})* *")
_DIGEST = re.compile(r"[A-Za-z0-9._:+=-]+")


def _flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    try:
        return env_flag(env, name, default=default)
    except ConfigRefusedError as error:
        raise DriverManagerSettingsError(str(error)) from None


def seconds(text: str, *, name: str, minimum: float = 0.0, maximum: float = _DAY) -> float:
    """``90``, ``90s``, ``5m``, ``1h``, ``1m30s``, ``500ms`` -> seconds, from ``minimum`` to ``maximum``."""
    try:
        value = env_duration({name: text}, name, default=0.0, minimum=minimum, maximum=maximum)
    except ConfigRefusedError:
        bounds = f"from {format_seconds(minimum)} to {format_seconds(maximum)}"
        raise DriverManagerSettingsError(f"{name}: not a duration {bounds}: {describe(text.strip())}") from None
    return 0.0 if value is None else value


def _text(env: Mapping[str, str], name: str, *, pattern: re.Pattern[str], what: str, limit: int) -> str:
    try:
        return env_text(env, name, default="", pattern=pattern, what=what, limit=limit)
    except ConfigRefusedError as error:
        raise DriverManagerSettingsError(str(error)) from None


@dataclass(frozen=True, kw_only=True)
class ManagerSettings:
    eviction: EvictionOptions
    operand_wait: float = 300.0
    preinstalled_wait: float = 60.0
    force_reinstall: bool = False
    digest: str = ""
    custom_label: str = ""  # NODE_LABEL_FOR_GPU_POD_EVICTION: another label to pause


def settings_from_env(env: Mapping[str, str]) -> ManagerSettings:
    """The driver manager's environment; DriverManagerSettingsError naming the variable for a bad value
    (every wait bounded: a node agent that never gives up wedges the node)."""
    timeout = seconds(env.get("EVICTION_TIMEOUT_SECONDS") or "300", name="EVICTION_TIMEOUT_SECONDS", minimum=1.0)
    drain_timeout = seconds(env.get("DRAIN_TIMEOUT_SECONDS") or "0s", name="DRAIN_TIMEOUT_SECONDS")
    eviction = EvictionOptions(
        gpu_pod_eviction=_flag(env, "ENABLE_GPU_POD_EVICTION", default=True),
        auto_drain=_flag(env, "ENABLE_AUTO_DRAIN", default=False),
        drain_force=_flag(env, "DRAIN_USE_FORCE", default=False),
        drain_selector=_text(env, "DRAIN_POD_SELECTOR_LABEL", pattern=_SELECTOR, what="a label selector", limit=1024),
        drain_delete_empty_dir=_flag(env, "DRAIN_DELETE_EMPTYDIR_DATA", default=False),
        # 0 means "no limit" upstream; a node agent that never gives up wedges the node, so it is bounded.
        timeout=drain_timeout or timeout,
        interval=seconds(
            env.get("EVICTION_POLL_SECONDS") or "1", name="EVICTION_POLL_SECONDS", minimum=0.01, maximum=300.0
        ),
    )
    return ManagerSettings(
        eviction=eviction,
        operand_wait=seconds(env.get("OPERAND_WAIT_SECONDS") or "300", name="OPERAND_WAIT_SECONDS"),
        preinstalled_wait=seconds(env.get("PREINSTALLED_WAIT_SECONDS") or "60", name="PREINSTALLED_WAIT_SECONDS"),
        force_reinstall=_flag(env, "FORCE_REINSTALL", default=False),
        digest=_text(env, "DRIVER_CONFIG_DIGEST", pattern=_DIGEST, what="a config digest", limit=128),
        custom_label=_text(env, "NODE_LABEL_FOR_GPU_POD_EVICTION", pattern=_LABEL_KEY, what="a label key", limit=317),
    )


async def uninstall_driver(
    ctx: AgentContext, *, cluster: NodeCluster, settings: ManagerSettings, clock: Clock = time.monotonic
) -> str:
    """The steps of the module docstring; returns what was done, raises DriverManagerError with the reason."""
    steps = Steps(ctx=ctx, cluster=cluster, host=driver_host(ctx), settings=settings, clock=clock)
    version = await steps.host_driver_version()
    if version is not None:
        await cluster.patch_node(labels={PREINSTALLED_LABEL: "pre-installed"})
        message = f"a driver ({version}) is installed on the host: labelled {PREINSTALLED_LABEL}=pre-installed"
        await cluster.event(reason="DriverPreInstalled", message=message)
        log.warning("driver-manager[%s]: %s", ctx.node_name, message)
        await ctx.sleep(settings.preinstalled_wait)
        raise DriverManagerError(message + "; the driver container is not needed on this node")
    node = await cluster.node()
    evict = settings.eviction.gpu_pod_eviction or settings.eviction.auto_drain
    if node.annotations.get(UPGRADE_ENABLED_ANNOTATION) == "true" and evict:
        log.info("driver-manager[%s]: eviction and drain are left to the upgrade controller", ctx.node_name)
        evict = False
    if not await steps.nvidia_loaded():
        await steps.cleanup()
        if not await steps.previous_driver_differs():
            await steps.finish()
            return "no NVIDIA module loaded: nothing to uninstall"
        try:
            # The previous driver unloaded itself on exit (nothing held it), but what the operands built
            # on it (the toolkit's CDI spec of its files, NVML handles) must start again on the new one.
            await steps.pause_operands()
        finally:
            await steps.finish()
        return "no NVIDIA module loaded; the previous driver's operands restart on the new one"
    try:
        await steps.pause_operands()
        if await steps.digest_unchanged():
            return "driver config digest unchanged: the loaded driver is kept"
        if evict:
            await steps.move_gpu_pods()
        await steps.unload(drain_on_busy=evict and settings.eviction.auto_drain)
        await steps.cleanup()
        return "modules unloaded: ready for the driver install"
    except EvictionError as error:
        raise DriverManagerError(str(error)) from error
    finally:
        # Every outcome, failures included: operands back, our cordon lifted.
        await steps.finish()


async def main(ctx: AgentContext) -> None:
    """Run the driver-manager steps once (an init container); a failure is the exit status and its reason."""
    cluster = cluster_of(ctx)
    if cluster is None:
        raise DriverManagerError("the driver manager needs cluster access (ctx.cluster) to pause operands")
    try:
        settings = settings_from_env(ctx.env)
        done = await uninstall_driver(ctx, cluster=cluster, settings=settings)
    except DriverManagerError as error:
        await cluster.event(reason="DriverManagerFailed", message=str(error), warning=True)
        log.error("driver-manager[%s]: %s", ctx.node_name, error)
        raise
    log.info("driver-manager[%s]: %s", ctx.node_name, done)
    await cluster.event(reason="DriverManagerDone", message=done)


__all__ = ["DRIVER_PAUSE", "DriverManagerError", "ManagerSettings", "main", "settings_from_env", "uninstall_driver"]
