"""``gpu-operator agent mig-manager``: watch the node's ``nvidia.com/mig.config`` and apply it.

The label is read every ``MIG_POLL_INTERVAL`` seconds (2 s by default); a reconfiguration runs once at
start and whenever the value changes, or when the state says a previous run did not finish (``pending``,
``rebooting``: the agent was restarted or the node rebooted mid-way). At every pass, deploy labels a
crashed run left at ``paused-for-mig-change`` are restored first, so a node never stays wedged.

Configs come from ``CONFIG_FILE`` (a mounted ConfigMap, re-read before each run) or the default set.
One that cannot be used (not UTF-8, not YAML, a key that is not a string, a count past its bound) fails
that run with a one-line reason naming the file and field (the state label ``failed`` and an Event):
nothing is applied, so the GPUs keep the geometry last applied. ``MIG_WAIT_TIMEOUT``,
``MIG_POLL_INTERVAL`` and ``MIG_HOST_SETTLE`` that are not numbers of seconds are refused at start.
A pending MIG mode change is applied by a GPU reset: ``nvidia-smi -r -i N`` in the driver root
(``NVIDIA_DRIVER_ROOT`` on the node: ``/`` for a host driver, ``/run/nvidia/driver`` for the driver
container's) on a real node, the backend's own reset on a simulated one; ``WITH_REBOOT=true`` allows a
reboot (in the host root) when a reset is not enough. ``MIG_WAIT_TIMEOUT`` (300 s) bounds the wait for
the GPU clients' pods to stop. ``MIG_MAINTENANCE_WINDOWS`` (JSON of the policy's ``maintenanceWindows``,
our extension) holds a change that is not yet applied until a window is open.

With ``WITH_SHUTDOWN_HOST_GPU_CLIENTS=true`` the host services named in ``GPU_CLIENTS_FILE`` (re-read
before each run; a bad file fails the run, naming the file and field) are stopped around the change
through ``chroot $HOST_ROOT_MOUNT systemctl``, the kubelet (``HOST_KUBELET_SYSTEMD_SERVICE``) too when
the MIG mode changes, and the selected config is recorded in ``HOST_MIG_MANAGER_STATE_FILE`` when the
host has that systemd override. A simulated node's backend resets GPUs itself and has no systemd: it
gets in-memory services instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_operator.agents.host import resolve_under
from gpu_operator.agents.migmanager.clients import (
    FakeServices,
    GpuClientsError,
    HostServices,
    SystemdServices,
    load_clients,
    run_in_root,
)
from gpu_operator.agents.migmanager.config import MigConfigError, MigConfigs, load
from gpu_operator.agents.migmanager.defaults import default_configs
from gpu_operator.agents.migmanager.reconfigure import (
    CONFIG_LABEL,
    STATE_LABEL,
    GpuReset,
    HostClients,
    MigApplyError,
    Options,
    Reconfigure,
)
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.cluster import cluster_of
from gpu_operator.agents.shared.configinput import env_seconds, load_json, read_text
from gpu_operator.agents.shared.operands import MIG_PAUSE, paused, restore_changes
from gpu_operator.api.windows import WindowSchedule
from gpu_operator.gpu.backend import GpuBackend, ResettableBackend
from gpu_operator.runtime.periodic import every

log = logging.getLogger(__name__)
WINDOWS_ENV = "MIG_MAINTENANCE_WINDOWS"
UNFINISHED = ("pending", "rebooting")
HOST_MIG_MANAGER_STATE_FILE = "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf"


class HostReset:
    """Resets through the driver's ``nvidia-smi`` in its root, reboots through ``reboot`` in the host root."""

    def __init__(
        self, *, host_root: Path, driver_root: Path | None = None, reboot_command: Sequence[str] = ("reboot",)
    ) -> None:
        self.host_root = host_root
        self.driver_root = driver_root or host_root
        self.reboot_command = tuple(reboot_command)

    def _run(self, root: Path, *command: str) -> None:
        try:
            result = run_in_root(root, *command)
        except OSError as error:  # no chroot, or no such command when the root is /
            raise MigApplyError(f"{' '.join(command)} failed: {error.strerror or error}") from error
        if result.returncode != 0:
            why = (result.stderr or result.stdout).strip()[:300] or f"exit status {result.returncode}"
            raise MigApplyError(f"{' '.join(command)} failed: {why}")

    def reset(self, index: int) -> None:
        self._run(self.driver_root, "nvidia-smi", "-r", "-i", str(index))

    def reboot(self) -> None:
        self._run(self.host_root, *self.reboot_command)


class BackendReset:
    """A backend that can reset its GPUs itself (the simulated one); a reboot resets every GPU."""

    def __init__(self, *, backend: GpuBackend, reset_gpu: Callable[[int], None]) -> None:
        self.backend = backend
        self.reset_gpu = reset_gpu

    def reset(self, index: int) -> None:
        self.reset_gpu(index)

    def reboot(self) -> None:
        for device in self.backend.devices():
            self.reset_gpu(device.index)


def resetter(ctx: AgentContext) -> GpuReset:
    if isinstance(ctx.gpu, ResettableBackend):
        return BackendReset(backend=ctx.gpu, reset_gpu=ctx.gpu.reset_gpu)
    root = host_root(ctx)
    # The driver's root as the node has it, through the host root (its symlinks followed there).
    driver_root = resolve_under(root, ctx.env.get("NVIDIA_DRIVER_ROOT") or "/")
    return HostReset(host_root=root, driver_root=driver_root)


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def host_root(ctx: AgentContext) -> Path:
    """The host's root as this container sees it: ``HOST_ROOT_MOUNT`` (upstream's name) or the agents' own."""
    mount = ctx.env.get("HOST_ROOT_MOUNT", "")
    return ctx.path(mount) if mount else ctx.host_path("/")


def host_services(ctx: AgentContext) -> HostServices:
    # A simulated node (its backend resets GPUs itself) has no host systemd to talk to.
    if isinstance(ctx.gpu, ResettableBackend):
        return FakeServices()
    return SystemdServices(host_root=host_root(ctx))


def host_clients(ctx: AgentContext, services: HostServices) -> HostClients | None:
    """The host side of a run, from a fresh read of the GPU clients file; None without the shutdown flag."""
    if not _flag(ctx.env.get("WITH_SHUTDOWN_HOST_GPU_CLIENTS")):
        return None
    path = ctx.env.get("GPU_CLIENTS_FILE", "")
    names = load_clients(ctx.path(path), source=path).systemd_services if path else ()
    state_file = ctx.env.get("HOST_MIG_MANAGER_STATE_FILE", HOST_MIG_MANAGER_STATE_FILE)
    return HostClients(
        services=services,
        names=names,
        kubelet=ctx.env.get("HOST_KUBELET_SYSTEMD_SERVICE", "kubelet.service"),
        state_file=resolve_under(host_root(ctx), state_file) if state_file else None,
    )


def maintenance_windows(ctx: AgentContext) -> WindowSchedule | None:
    """``MIG_MAINTENANCE_WINDOWS`` (the operator renders the policy's ``maintenanceWindows`` as JSON)."""
    text = ctx.env.get(WINDOWS_ENV, "")
    if not text:
        return None
    doc = load_json(text, source=WINDOWS_ENV, error=MigConfigError)
    try:
        pairs = [(str(w["schedule"]), str(w["duration"])) for w in doc["windows"]]
        return WindowSchedule.parse(zone=str(doc.get("timeZone") or "UTC"), windows=pairs)
    except (ValueError, KeyError, TypeError) as error:
        raise MigConfigError(f"{WINDOWS_ENV}: {error}") from error


def load_configs(ctx: AgentContext) -> MigConfigs:
    path = ctx.env.get("CONFIG_FILE", "")
    if not path:
        return default_configs()
    return load(read_text(ctx.path(path), source=path, error=MigConfigError), source=path)


def read_options(ctx: AgentContext) -> Options:
    """The timing options from the environment; a value that is not a number of seconds in its bounds
    is refused (``ConfigRefusedError``) naming the variable."""
    return Options(
        wait_timeout=env_seconds(ctx.env, "MIG_WAIT_TIMEOUT", default=300.0, maximum=86400.0),
        poll_interval=env_seconds(ctx.env, "MIG_POLL_INTERVAL", default=2.0, maximum=3600.0),
        with_reboot=_flag(ctx.env.get("WITH_REBOOT")),
        host_settle=env_seconds(ctx.env, "MIG_HOST_SETTLE", default=30.0, maximum=3600.0),
    )


async def main(ctx: AgentContext) -> None:
    """Apply ``nvidia.com/mig.config`` whenever it changes, until stopped."""
    name = f"mig-manager[{ctx.node_name}]"
    if ctx.node is None:
        log.error("%s: no access to the Node: nothing to watch", name)
        await ctx.sleep(None)
        return
    node, cluster = ctx.node, cluster_of(ctx)
    options = read_options(ctx)
    work = Reconfigure(
        node=node, cluster=cluster, backend=ctx.gpu, reset=resetter(ctx), options=options, sleep=ctx.sleep, name=name
    )
    services = host_services(ctx)
    last: list[str] = []  # the config last applied (or given up on), so an unchanged label is not redone
    ctx.set_ready(True)

    async def round_() -> None:
        labels = await node.labels()
        if paused(labels, reason=MIG_PAUSE):
            log.warning("%s: restoring operands left paused by an unfinished run", name)
            await node.patch_labels(restore_changes(labels, reason=MIG_PAUSE))
        wanted = labels.get(CONFIG_LABEL, "")
        if wanted and (last[-1:] != [wanted] or labels.get(STATE_LABEL) in UNFINISHED):
            last[:] = [wanted]
            try:
                configs = await asyncio.to_thread(load_configs, ctx)
                work.options = dataclasses.replace(work.options, windows=maintenance_windows(ctx))
                work.host = await asyncio.to_thread(host_clients, ctx, services)
            except (MigConfigError, GpuClientsError) as error:
                await work.fail(str(error))
            else:
                await work.run(name=wanted, configs=configs)

    # An API or GPU failure is logged, counted and retried by the runtime; the watch goes on.
    await every(name=name, seconds=options.poll_interval, work=round_, sleep=ctx.sleep)
