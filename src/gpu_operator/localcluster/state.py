"""The state file of a cluster started by ``gpu-operator cluster up``.

``STATE_DIR/state.json`` records the process that owns the cluster (the foreground ``up`` or the detached
supervisor), its phase (``starting``, ``ready``, ``failed``), the API server URL, the kubeconfig, the data
directory and each component's pid and log. The owner is identified by pid *and* its start time from
``/proc``, so a recycled pid is never mistaken for a live cluster. Writes are atomic (rename).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
PHASE_STARTING = "starting"
PHASE_READY = "ready"
PHASE_FAILED = "failed"


def default_state_dir() -> Path:
    """``$XDG_CACHE_HOME/gpu-operator/cluster`` (``~/.cache/gpu-operator/cluster`` by default)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpu-operator" / "cluster"


@dataclass
class ComponentState:
    """One component process as recorded in the state file."""

    pid: int | None
    log: str


@dataclass
class ClusterState:
    """The content of ``state.json``."""

    pid: int
    pid_start: str | None
    phase: str
    detached: bool
    started_at: float
    server: str | None = None
    kubeconfig: str | None = None
    data_dir: str | None = None
    bin_dir: str | None = None
    start_seconds: float | None = None
    error: str | None = None
    components: dict[str, ComponentState] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data: dict[str, Any] = json.loads(text)
        components = {
            name: ComponentState(pid=value.get("pid"), log=str(value.get("log", "")))
            for name, value in dict(data.pop("components", {})).items()
        }
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in known}, components=components)

    def owner_alive(self) -> bool:
        """The owning process still runs (same pid, same start time)."""
        return process_alive(self.pid) and process_start_time(self.pid) == self.pid_start


def process_start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing parenthesis.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def state_path(*, state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def read_state(*, state_dir: Path) -> ClusterState | None:
    """The recorded state, or None when there is none (or it is unreadable)."""
    try:
        return ClusterState.from_json(state_path(state_dir=state_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None


def write_state(*, state_dir: Path, state: ClusterState) -> None:
    """Write ``state.json`` atomically."""
    state_dir.mkdir(parents=True, exist_ok=True)
    target = state_path(state_dir=state_dir)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(state.to_json(), encoding="utf-8")
    os.replace(temporary, target)


def remove_state(*, state_dir: Path) -> None:
    state_path(state_dir=state_dir).unlink(missing_ok=True)


def live_state(*, state_dir: Path) -> ClusterState | None:
    """The recorded state if its owner still runs, else None."""
    state = read_state(state_dir=state_dir)
    if state is None or not state.owner_alive():
        return None
    return state


def terminate_owner(*, state: ClusterState, timeout: float = 60.0) -> bool:
    """SIGTERM the owner and wait for it to exit (SIGKILL after ``timeout``); True if it exited cleanly.

    The owner stops its components on SIGTERM; if it has to be killed, the kernel kills the components
    through their parent-death signal.
    """
    if not state.owner_alive():
        return True
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(state.pid)
        if not state.owner_alive():
            return True
        time.sleep(0.1)
    os.kill(state.pid, signal.SIGKILL)
    reap(state.pid)
    return False


def reap(pid: int) -> bool:
    """Collect ``pid`` if it is our exited child (a supervisor started from this process); True when it has
    exited or is not our child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid
