"""The cgroup subtree of a run's real nodes, on cgroup v1 and v2 hosts.

Every process a node starts lives under one directory per hierarchy (``/sys/fs/cgroup/<h>/<run>`` on v1,
``/sys/fs/cgroup/<run>`` on v2): containerd and its shims, which double-fork away from their parent and
so escape ``PR_SET_PDEATHSIG``, and every container. Removing a run is then "kill what is in the subtree,
then remove its directories", whatever state the run died in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def is_v2(*, root: Path = CGROUP_ROOT) -> bool:
    """The host mounts the unified (v2) hierarchy at ``root``."""
    return (root / "cgroup.controllers").is_file()


def hierarchies(*, root: Path = CGROUP_ROOT) -> list[Path]:
    """The mount points of the hierarchies: ``[root]`` on v2, every v1 hierarchy otherwise."""
    if is_v2(root=root):
        return [root]
    found = []
    for entry in sorted(root.iterdir()):
        # Skip the symlinks (cpu,cpuacct -> cpu) and anything that is not a mounted hierarchy.
        if entry.is_dir() and not entry.is_symlink() and (entry / "cgroup.procs").is_file():
            found.append(entry)
    return found


def create(path: str, *, root: Path = CGROUP_ROOT) -> None:
    """Create cgroup ``path`` (``/a/b``) in every hierarchy, with what its children need to be usable."""
    parts = [p for p in path.split("/") if p]
    v2 = is_v2(root=root)
    for hierarchy in hierarchies(root=root):
        current = hierarchy
        for part in parts:
            parent = current
            current = current / part
            if v2:
                _enable_controllers(parent)
            current.mkdir(exist_ok=True)
            # A new v1 cpuset group has no CPUs and no memory nodes: nothing could run in it.
            for name in ("cpuset.cpus", "cpuset.mems"):
                source, target = parent / name, current / name
                if not v2 and source.is_file() and not target.read_text().strip():
                    target.write_text(source.read_text())


def _enable_controllers(directory: Path) -> None:
    controllers = (directory / "cgroup.controllers").read_text().split()
    wanted = [c for c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb") if c in controllers]
    for controller in wanted:
        # A controller that cannot be delegated here (e.g. a threaded subtree) is left off.
        with contextlib.suppress(OSError):
            (directory / "cgroup.subtree_control").write_text(f"+{controller}")


def join(path: str, *, pid: int, root: Path = CGROUP_ROOT) -> None:
    """Move process ``pid`` into cgroup ``path`` in every hierarchy."""
    for hierarchy in hierarchies(root=root):
        (hierarchy / path.strip("/") / "cgroup.procs").write_text(f"{pid}\n")


def _walk(directory: Path) -> Iterator[Path]:
    """``directory`` and every cgroup below it, deepest first."""
    if not directory.is_dir():
        return
    for child in sorted(directory.iterdir()):
        if child.is_dir():
            yield from _walk(child)
    yield directory


def pids(path: str, *, root: Path = CGROUP_ROOT) -> set[int]:
    """Every process in cgroup ``path`` or below it, in any hierarchy."""
    found: set[int] = set()
    for hierarchy in hierarchies(root=root):
        for directory in _walk(hierarchy / path.strip("/")):
            with contextlib.suppress(OSError):
                found.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
    return found


def exists(path: str, *, root: Path = CGROUP_ROOT) -> bool:
    """Cgroup ``path`` exists in some hierarchy."""
    return any((h / path.strip("/")).is_dir() for h in hierarchies(root=root))


def remove(path: str, *, root: Path = CGROUP_ROOT, timeout: float = 20.0) -> set[int]:
    """Kill every process under ``path`` and remove the directories; return the PIDs that were killed.

    Raises ``TimeoutError`` if processes remain after ``timeout`` seconds (a process stuck in the kernel).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        remaining = pids(path, root=root)
        if not remaining:
            break
        for pid in remaining - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= remaining
        if time.monotonic() >= deadline:
            raise TimeoutError(f"processes {sorted(remaining)} in cgroup {path} did not die")
        time.sleep(0.05)
    for hierarchy in hierarchies(root=root):
        for directory in _walk(hierarchy / path.strip("/")):
            _rmdir_when_empty(directory, deadline=deadline)
    return killed


def _rmdir_when_empty(directory: Path, *, deadline: float) -> None:
    # A cgroup whose last process just died can stay busy for a moment.
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
