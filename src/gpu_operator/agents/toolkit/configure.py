"""Configuring and unconfiguring the node's container runtime: which files change, and how.

``plan_configure``/``plan_unconfigure`` read the runtime's files and return the new text of each file
to write (or None for one to remove) without touching anything; ``apply`` writes them, only those
whose content differs, so a second run writes nothing and the runtime is not restarted. The values
our edits replaced (a previous default runtime, a missing ``enable_cdi``) are kept in a small state
file in the toolkit directory, so that uninstalling puts them back exactly.

``restart`` then makes the runtime load the change: ``signal`` finds the process behind the runtime's
socket with ``SO_PEERCRED`` (the toolkit runs in the host's PID namespace) and sends it SIGHUP (Docker
reloads ``daemon.json``; containerd exits and its supervisor -- systemd, k3s -- starts it with the new
file); ``systemd`` runs ``systemctl restart`` in the host root; ``none`` leaves it to the admin. Each
outcome comes back as a sentence for the log; a runtime that is simply not there (a simulated node) is
not an error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.agents.shared.files import ConfigFileError, read_text, remove, write_atomic
from gpu_operator.agents.toolkit import containerd, crio, docker, k3s
from gpu_operator.agents.toolkit.containerd import ContainerdSettings, Previous
from gpu_operator.agents.toolkit.settings import ToolkitSettings
from gpu_operator.agents.toolkit.tomledit import parse

STATE_FILE = ".runtime-state.json"
FILE_KEY = "__file__"  # state keys describing the main file itself rather than one of its values
TAIL_KEY = "__tail__"
Reader = Callable[[str], str | None]


@dataclass
class Plan:
    """New content per host path (None: remove the file), and the previous values to remember."""

    writes: dict[str, str | None] = field(default_factory=dict)
    previous: dict[str, Previous] = field(default_factory=dict)


def _containerd_settings(settings: ToolkitSettings) -> ContainerdSettings:
    return ContainerdSettings(
        runtimes=settings.runtimes(), default_runtime=settings.default_runtime, enable_cdi=settings.enable_cdi
    )


def _use_drop_in(settings: ToolkitSettings, main: str | None) -> bool:
    if settings.drop_in is None:
        return False
    if settings.drop_in_mode == "always":
        return True
    if not main or not main.strip():
        return False
    doc = parse(main, path=settings.config)
    return containerd.imports_cover(doc, settings.drop_in, path=settings.config)


def plan_configure(*, settings: ToolkitSettings, read: Reader) -> Plan:
    """The files to write so the runtime knows the NVIDIA runtimes (ConfigFileError for a bad input)."""
    plan = Plan()
    main = read(settings.config)
    if settings.runtime == "containerd":
        wanted = _containerd_settings(settings)
        version = settings.template_version
        if version is not None:
            rendered = read(settings.config.removesuffix(".tmpl"))
            plan.writes[settings.config] = k3s.configure_template(
                main, path=settings.config, version=version, settings=wanted, rendered=rendered
            )
        elif settings.drop_in is not None and _use_drop_in(settings, main):
            text, own, previous = containerd.drop_in(
                main, main_path=settings.config, drop_in_path=settings.drop_in, settings=wanted
            )
            plan.writes[settings.config], plan.writes[settings.drop_in] = text, own
            plan.previous[settings.config] = previous
        else:
            text, previous = containerd.configure_in_place(main, path=settings.config, settings=wanted)
            plan.writes[settings.config], plan.previous[settings.config] = text, previous
    elif settings.runtime == "crio":
        runtimes = settings.runtimes()
        if settings.drop_in is not None:
            plan.writes[settings.drop_in] = crio.drop_in(
                main, main_path=settings.config, runtimes=runtimes, default_runtime=settings.default_runtime
            )
        else:
            text, previous = crio.configure_in_place(
                main, path=settings.config, runtimes=runtimes, default_runtime=settings.default_runtime
            )
            plan.writes[settings.config], plan.previous[settings.config] = text, previous
    else:
        text, previous = docker.configure(
            main,
            path=settings.config,
            runtimes=settings.runtimes(),
            default_runtime=settings.default_runtime,
            enable_cdi=settings.enable_cdi,
        )
        plan.writes[settings.config], plan.previous[settings.config] = text, previous
    if plan.writes.get(settings.config, main) != main:
        plan.previous[settings.config] = {**plan.previous.get(settings.config, {}), **_original_shape(main)}
    return plan


def _original_shape(text: str | None) -> Previous:
    """How the main file looked before our first edit, beyond its values: missing or empty, and its
    trailing whitespace (tomlkit gives the blank line before an appended table to the table above)."""
    if text is None:
        return {FILE_KEY: "absent"}
    if not text.strip():
        return {FILE_KEY: "empty"}
    return {TAIL_KEY: text[len(text.rstrip()) :]}


def _trivial(text: str) -> bool:
    """Whether a config holds nothing but a version and empty tables (what we leave of a file we created)."""
    try:
        data: Any = json.loads(text) if text.lstrip().startswith("{") else parse(text, path="").unwrap()
    except (ValueError, ConfigFileError):
        return False

    def empty(value: Any) -> bool:
        return isinstance(value, dict) and all(empty(v) for v in value.values())

    return isinstance(data, dict) and all(empty(v) for k, v in data.items() if k != "version")


def _finish(text: str | None, previous: Mapping[str, Any]) -> str | None:
    if text is None:
        return None
    if previous.get(FILE_KEY) in ("absent", "empty") and _trivial(text):
        return None if previous[FILE_KEY] == "absent" else ""
    if TAIL_KEY in previous:
        return text.rstrip() + str(previous[TAIL_KEY])
    return text


def plan_unconfigure(*, settings: ToolkitSettings, read: Reader, state: Mapping[str, Previous]) -> Plan:
    """The files to write so that nothing of ours is left in the runtime's configuration."""
    plan = Plan()
    names = tuple(r.name for r in settings.runtimes())
    main = read(settings.config)
    previous = state.get(settings.config, {})
    if settings.runtime == "containerd":
        if settings.template_version is not None:
            text = k3s.unconfigure_template(main)
        else:
            text = containerd.unconfigure_in_place(main, path=settings.config, names=names, previous=previous)
        if settings.drop_in is not None and settings.template_version is None:
            text = containerd.remove_drop_in_import(
                text, main_path=settings.config, drop_in_path=settings.drop_in, previous=previous
            )
            if read(settings.drop_in) is not None:
                plan.writes[settings.drop_in] = None
    elif settings.runtime == "crio":
        if settings.drop_in is not None and read(settings.drop_in) is not None:
            plan.writes[settings.drop_in] = None
        text = crio.unconfigure_in_place(main, path=settings.config, names=names, previous=previous)
    else:
        text = docker.unconfigure(main, path=settings.config, names=names, previous=previous)
    if main is not None:
        plan.writes[settings.config] = _finish(text, previous)
    return plan


def apply(plan: Plan, *, host: Callable[[str], Path], ours: frozenset[str] = frozenset()) -> list[str]:
    """Write the plan; returns the host paths that changed. Files in ``ours`` get no backup."""
    changed = []
    for path, content in plan.writes.items():
        target = host(path)
        if content is None:
            if remove(target):
                changed.append(path)
        elif write_atomic(target, content, backup=path not in ours):
            changed.append(path)
    return changed


def load_state(path: Path) -> dict[str, Previous]:
    text = read_text(path)
    if not text:
        return {}
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ConfigFileError(f"{path}: not valid JSON ({error}); remove it to start afresh") from error
    files = data.get("files", {}) if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        # Guessing what a mangled record meant could restore the wrong values into the runtime's config.
        raise ConfigFileError(f"{path}: not a toolkit state file (files must map paths to objects); remove it")
    return {str(k): dict(v) for k, v in files.items()}


def save_state(path: Path, *, state: Mapping[str, Previous]) -> None:
    kept = {k: v for k, v in state.items() if v}
    if not kept:
        remove(path)
        return
    write_atomic(path, json.dumps({"version": 1, "files": kept}, indent=2, sort_keys=True) + "\n", backup=False)


def merge_previous(state: Mapping[str, Previous], *, new: Mapping[str, Previous]) -> dict[str, Previous]:
    """The first value we replaced is the original: a later run never overwrites a recorded one."""
    merged = {k: dict(v) for k, v in state.items()}
    for path, values in new.items():
        merged[path] = {**values, **merged.get(path, {})}
    return merged


def reader(host: Callable[[str], Path]) -> Reader:
    def read(path: str) -> str | None:
        target = host(path)
        try:
            return read_text(target)
        except ConfigFileError as error:
            # Name the file as the admin knows it (the host path), not where this container sees it.
            message = str(error)
            prefix = f"{target}: "
            raise ConfigFileError(
                f"{path}: {message[len(prefix) :]}" if message.startswith(prefix) else message
            ) from error

    return read


# --- making the runtime load the change ---------------------------------------------------------

_UCRED = struct.Struct("3i")  # pid, uid, gid


def peer_pid(socket_path: Path, *, timeout: float = 2.0) -> int | None:
    """The PID of the process listening on the unix socket, None when nobody answers there."""
    if not socket_path.exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(socket_path))
        except OSError:
            return None
        pid, _, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    # 0 means the peer lives in a PID namespace we cannot see.
    return pid or None


def signal_runtime(*, name: str, socket_path: Path, sig: signal.Signals = signal.SIGHUP) -> str:
    pid = peer_pid(socket_path)
    if pid is None:
        return f"no {name} is listening on {socket_path}: nothing to restart"
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return f"{name} (pid {pid}) exited before it could be signalled"
    except PermissionError:
        return f"not allowed to signal {name} (pid {pid}): restart it yourself to load the change"
    return f"sent {sig.name} to {name} (pid {pid}) to load the new configuration"


def systemd_restart(*, unit: str, host_root: Path, timeout: float = 120.0) -> str:
    if not (host_root / "run" / "systemd" / "system").is_dir():
        return f"systemd is not running on the host: restart {unit} yourself to load the change"
    command = ["chroot", str(host_root), "systemctl", "restart", "--", unit]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"systemctl restart {unit} failed: {error}"
    if result.returncode != 0:
        return f"systemctl restart {unit} failed ({result.returncode}): {result.stderr.strip()[:300]}"
    return f"restarted {unit} with systemd"


def restart(*, mode: str, name: str, unit: str, socket_path: Path, host_root: Path) -> str:
    """Apply ``mode`` (signal, systemd or none); returns what happened, for the log."""
    if mode == "signal":
        return signal_runtime(name=name, socket_path=socket_path)
    if mode == "systemd":
        return systemd_restart(unit=unit, host_root=host_root)
    return f"restart mode none: {name} loads the change when it next starts"
