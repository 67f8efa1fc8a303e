"""The status files under ``/run/nvidia/validations`` and waiting for them (written by the validator,
read by the node status exporter).

Upstream's files: ``driver-ready`` (shell-sourceable ``KEY=value`` lines telling later operands where
the driver root is), ``toolkit-ready``, ``cuda-ready``, ``plugin-ready`` (empty), and the driver
container's own ``.driver-ctr-ready``. Files are written atomically (a reader never sources half a
file) and removed before a component validates again, so a stale file never vouches for a node whose
state changed.

:func:`wait_until` is the one waiting loop: it polls a check, logs what it waits for and the current
reason every ``log_every`` seconds (10 s), and returns as soon as the check passes. Time and sleeping
are injected, so unit tests run it without real sleeping and a container stops promptly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from gpu_operator.agents.shared import shellquote
from gpu_operator.runtime.backoff import error_kind
from gpu_operator.runtime.periodic import attempt

OUTPUT_DIR = "/run/nvidia/validations"
DRIVER_READY = "driver-ready"
DRIVER_CONTAINER_READY = ".driver-ctr-ready"
TOOLKIT_READY = "toolkit-ready"
CUDA_READY = "cuda-ready"
PLUGIN_READY = "plugin-ready"
#: Every file a component writes, by component.
READY_FILES: Mapping[str, str] = MappingProxyType(
    {"driver": DRIVER_READY, "toolkit": TOOLKIT_READY, "cuda": CUDA_READY, "plugin": PLUGIN_READY}
)
#: How often a waiting component says what it waits for.
LOG_EVERY_SECONDS = 10.0

Sleeper = Callable[[float], Awaitable[bool]]  # sleep up to s seconds; True once asked to stop
Clock = Callable[[], float]
Check = Callable[[], Awaitable[str | None]]  # None when satisfied, else why not


class StatusDir:
    """The validations directory of one node (a path on this machine)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def file(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        return self.file(name).is_file()

    def write(self, name: str, content: str = "") -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.file(name)
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_text(content, encoding="utf-8")
        os.chmod(tmp, 0o644)
        tmp.replace(target)
        return target

    def remove(self, name: str) -> None:
        self.file(name).unlink(missing_ok=True)

    def ready(self) -> dict[str, bool]:
        """Whether each component's file is there, by component."""
        return {component: self.exists(name) for component, name in READY_FILES.items()}


def driver_ready_content(*, host_driver: bool, driver_root: str, driver_root_ctr_path: str) -> str:
    """``driver-ready``: where the driver lives, for entrypoints that source the file."""
    dev_root = "/" if host_driver else driver_root
    dev_ctr = "/host" if host_driver else driver_root_ctr_path
    lines = {
        "IS_HOST_DRIVER": "true" if host_driver else "false",
        "NVIDIA_DRIVER_ROOT": driver_root,
        "DRIVER_ROOT_CTR_PATH": driver_root_ctr_path,
        "NVIDIA_DEV_ROOT": dev_root,
        "DEV_ROOT_CTR_PATH": dev_ctr,
    }
    # Sourced by a shell: each value is quoted, so a path the user chose is carried, never run.
    return shellquote.assignments(lines, field="driver-ready")


def file_check(status: StatusDir, *, name: str, why: str) -> Check:
    """A check that passes once ``name`` exists; the reason names the file and ``why`` it matters."""

    async def check() -> str | None:
        if status.exists(name):
            return None
        return f"{status.file(name)} does not exist yet ({why})"

    return check


async def wait_until(
    check: Check,
    *,
    waiting_for: str,
    poll: float,
    sleep: Sleeper,
    clock: Clock,
    log: logging.Logger,
    log_every: float = LOG_EVERY_SECONDS,
    first_poll: float | None = None,
) -> bool:
    """Poll ``check`` every ``poll`` s until it passes (True) or ``sleep`` reports stopping (False). With
    ``first_poll`` the first retry comes after that long and each next one after twice the last, up to
    ``poll``: a check that fails only while its subject settles (a plugin registering again after a
    driver restart) passes within a second of it, not at the next 5 s tick.

    A check that raises (the API server unreachable while reading the Node) has not passed yet: it is
    logged and polled again, so a transient failure does not fail the validation."""
    began = clock()
    logged: float | None = None
    delay = poll if first_poll is None else min(first_poll, poll)
    while True:
        tried = await attempt(check, name=waiting_for)
        reason = tried.value if tried.error is None else f"the check failed ({error_kind(tried.error)}): {tried.error}"
        now = clock()
        if reason is None:
            if logged is not None:
                log.info("%s: done after %.1f s", waiting_for, now - began)
            return True
        if logged is None or now - logged >= log_every:
            log.info("waiting for %s (%.0f s so far): %s", waiting_for, now - began, reason)
            logged = now
        if await sleep(delay):
            return False
        delay = min(delay * 2, poll)
