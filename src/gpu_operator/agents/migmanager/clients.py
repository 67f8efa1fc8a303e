"""Host GPU clients: the systemd services the MIG manager stops around a MIG change, and the file naming them.

The GPU clients file (``GPU_CLIENTS_FILE``, ConfigMap ``default-gpu-clients``, key ``clients.yaml``) is
``version: v1`` and ``systemd-services: [...]`` (operands.md §6); a bad one is an error naming the file
and the field. With ``WITH_SHUTDOWN_HOST_GPU_CLIENTS``, those services (and ``kubelet.service`` when the
MIG mode changes) are stopped before the GPUs are touched and started again afterwards: only the ones
that were active, so an admin's stopped service stays stopped. They run on the host through its root
(``chroot $HOST_ROOT_MOUNT systemctl ...``) behind :class:`HostServices`, whose in-memory
:class:`FakeServices` lets tests and simulated nodes run without systemd.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe, one_line, read_text
from gpu_operator.api.yamltext import YamlError, load_one

log = logging.getLogger(__name__)
_UNIT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.@\\")


class GpuClientsError(ConfigRefusedError):
    """The GPU clients file is not usable; the message names the file and the field."""


class HostServiceError(RuntimeError):
    """A host service could not be stopped or started; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class GpuClients:
    systemd_services: tuple[str, ...] = ()


def parse_clients(text: str, *, source: str) -> GpuClients:
    """The GPU clients in ``text`` (GpuClientsError naming ``source`` and the field)."""
    try:
        data: Any = load_one(text, source=source)
    except YamlError as error:
        raise GpuClientsError(one_line(str(error), limit=500)) from error  # PyYAML's messages span lines
    if not isinstance(data, dict):
        raise GpuClientsError(f"{source}: the top level must be a mapping with version and systemd-services")
    unknown = sorted(str(k) for k in set(data) - {"version", "systemd-services"})
    if unknown:
        raise GpuClientsError(f"{source}: unknown field(s) {', '.join(unknown)}")
    if data.get("version") != "v1":
        raise GpuClientsError(f"{source}: version must be v1, got {data.get('version')!r}")
    services = data.get("systemd-services") or []
    if not isinstance(services, list):
        raise GpuClientsError(f"{source}: systemd-services must be a list of unit names")
    for i, name in enumerate(services):
        # A unit name goes on a command line: refuse anything systemd would not take as one.
        if not isinstance(name, str) or not name or not set(name) <= _UNIT or name.startswith("-") or len(name) > 256:
            raise GpuClientsError(f"{source}: systemd-services[{i}] is not a systemd unit name: {describe(name)}")
    return GpuClients(systemd_services=tuple(dict.fromkeys(services)))


def load_clients(path: Path, *, source: str) -> GpuClients:
    return parse_clients(read_text(path, source=source, error=GpuClientsError), source=source)


class HostServices(Protocol):
    """The host's systemd, as far as the MIG manager uses it."""

    def is_active(self, name: str) -> bool: ...

    def stop(self, name: str) -> None: ...

    def start(self, name: str) -> None: ...

    def daemon_reload(self) -> None: ...


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def run_in_root(root: Path, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``command`` run with ``root`` as its ``/``: through chroot, or directly when ``root`` already is ``/``."""
    argv = list(command) if root == Path("/") else ["chroot", str(root), *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


class SystemdServices:
    """The host's systemd through ``chroot <host root> systemctl``."""

    def __init__(self, *, host_root: Path, run: Runner = run_in_root) -> None:
        self.host_root = host_root
        self._run = run

    def _systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run(self.host_root, "systemctl", *args)

    def is_active(self, name: str) -> bool:
        return self._systemctl("is-active", "--quiet", "--", name).returncode == 0

    def _change(self, verb: str, name: str) -> None:
        result = self._systemctl(verb, "--", name)  # "--": a name is never read as an option
        if result.returncode != 0:
            why = (result.stderr or result.stdout).strip()[:300] or f"exit status {result.returncode}"
            raise HostServiceError(f"systemctl {verb} {name} failed: {why}")

    def stop(self, name: str) -> None:
        self._change("stop", name)

    def start(self, name: str) -> None:
        self._change("start", name)

    def daemon_reload(self) -> None:
        self._change("daemon-reload", "--no-ask-password")


class FakeServices:
    """An in-memory systemd: the services in ``active`` run; a name in ``failing`` fails that verb."""

    def __init__(self, *, active: Iterable[str] = (), failing: Iterable[tuple[str, str]] = ()) -> None:
        self.active = set(active)
        self.failing = set(failing)  # (verb, service)
        self.reloads = 0

    def is_active(self, name: str) -> bool:
        return name in self.active

    def _check(self, verb: str, name: str) -> None:
        if (verb, name) in self.failing:
            raise HostServiceError(f"systemctl {verb} {name} failed: Job for {name} failed")

    def stop(self, name: str) -> None:
        self._check("stop", name)
        self.active.discard(name)

    def start(self, name: str) -> None:
        self._check("start", name)
        self.active.add(name)

    def daemon_reload(self) -> None:
        self.reloads += 1


def stop_services(services: HostServices, names: Sequence[str]) -> list[str]:
    """Stop the active services among ``names``, in order; the ones stopped.

    If one cannot be stopped, those already stopped are started again before HostServiceError is
    raised: a failed MIG change must not leave the host without its GPU clients.
    """
    stopped: list[str] = []
    for name in names:
        try:
            if not services.is_active(name):
                continue
            log.info("stopping host GPU client %s", name)
            services.stop(name)
        except HostServiceError:
            start_services(services, stopped, quiet=True)
            raise
        stopped.append(name)
    return stopped


def start_services(services: HostServices, names: Sequence[str], *, quiet: bool = False) -> None:
    """Start ``names`` in order, trying every one; HostServiceError listing the failures (unless ``quiet``)."""
    failures: list[str] = []
    for name in names:
        try:
            services.start(name)
        except HostServiceError as error:
            log.error("%s", error)
            failures.append(str(error))
    if failures and not quiet:
        raise HostServiceError("; ".join(failures))
