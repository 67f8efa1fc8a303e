"""Owning a cluster until told to stop: the foreground ``cluster up`` and the detached supervisor.

:func:`serve` starts a :class:`~gpu_operator.localcluster.cluster.LocalCluster`, records it in the state
file, then watches the components until SIGTERM, SIGHUP or Ctrl-C (stopping everything cleanly) or until a
component dies (recording the failure with the component's log tail, then stopping the rest).

``python -m gpu_operator.localcluster.supervisor --state-dir DIR`` runs :func:`serve` detached from any
terminal; :func:`spawn_detached` starts it in a new session and :func:`wait_until_settled` waits for it to
report ``ready`` or ``failed``. The components are children of the supervisor and die with it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from gpu_operator.localcluster.binaries import CONTROL_PLANE, KubeBinaries, locate_binaries
from gpu_operator.localcluster.cluster import DEFAULT_START_TIMEOUT, LocalCluster
from gpu_operator.localcluster.nodes.fakehost import PciFunction
from gpu_operator.localcluster.nodes.spec import NodeSetup
from gpu_operator.localcluster.state import (
    PHASE_FAILED,
    PHASE_READY,
    PHASE_STARTING,
    ClusterState,
    ComponentState,
    process_alive,
    process_start_time,
    read_state,
    reap,
    remove_state,
    write_state,
)

SUPERVISOR_LOG = "supervisor.log"


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _record(*, state_dir: Path, cluster: LocalCluster, state: ClusterState) -> None:
    state.server = cluster.server
    state.kubeconfig = str(cluster.kubeconfig_path)
    state.data_dir = str(cluster.data_dir)
    state.bin_dir = str(cluster.binaries.bin_dir)
    state.start_seconds = cluster.timings.get("total")
    state.components = {
        name: ComponentState(pid=process.pid, log=str(process.log_path)) for name, process in cluster.processes.items()
    }
    if cluster.real_nodes is not None:
        for node in cluster.real_nodes.nodes:
            for process in node.processes.values():
                state.components[process.name] = ComponentState(pid=process.pid, log=str(process.log_path))
    write_state(state_dir=state_dir, state=state)


def serve(
    *,
    state_dir: Path,
    binaries: KubeBinaries,
    detached: bool,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    on_ready: Callable[[LocalCluster], None] | None = None,
    poll_interval: float = 1.0,
    real_nodes: int = 0,
    node_images: Sequence[Path] = (),
    node_hardware: Sequence[Sequence[PciFunction]] = (),
    node_setups: Sequence[NodeSetup] = (),
) -> int:
    """Run a cluster until a signal (exit status 0) or a component failure (exit status 1)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    state = ClusterState(
        pid=os.getpid(),
        pid_start=process_start_time(os.getpid()),
        phase=PHASE_STARTING,
        detached=detached,
        started_at=time.time(),
    )
    write_state(state_dir=state_dir, state=state)
    cluster = LocalCluster(
        binaries=binaries,
        data_dir=state_dir / "data",
        start_timeout=start_timeout,
        handle_sigterm=False,
        real_nodes=real_nodes,
        node_images=node_images,
        node_hardware=node_hardware,
        node_setups=node_setups,
    )
    clean = False
    try:
        try:
            cluster.start()
        except Exception as error:  # recorded for `cluster up --detach` / `cluster status`, then re-raised
            state.phase, state.error = PHASE_FAILED, str(error)
            write_state(state_dir=state_dir, state=state)
            raise
        state.phase = PHASE_READY
        _record(state_dir=state_dir, cluster=cluster, state=state)
        if on_ready is not None:
            on_ready(cluster)
        while cluster.is_running():
            time.sleep(poll_interval)
        # A process that exited, or else a real node whose watcher no longer keeps it up.
        dead = next((p for p in cluster.all_processes() if not p.is_running()), None)
        state.phase, state.error = PHASE_FAILED, str(dead.exit_error()) if dead else "a real node stopped"
        write_state(state_dir=state_dir, state=state)
        return 1
    except (KeyboardInterrupt, SystemExit):
        clean = True
        return 0
    finally:
        cluster.stop()
        if clean or state.phase != PHASE_FAILED:
            remove_state(state_dir=state_dir)


def spawn_detached(
    *,
    state_dir: Path,
    binaries: KubeBinaries,
    start_timeout: float,
    real_nodes: int = 0,
    node_images: Sequence[Path] = (),
) -> int:
    """Start the supervisor in a new session, its output in ``STATE_DIR/supervisor.log``; return its pid.

    ``posix_spawn`` rather than ``subprocess``: the caller keeps only a pid, so nothing warns about a child
    left running when the caller exits first (the supervisor is then re-parented to init).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "gpu_operator.localcluster.supervisor",
        f"--state-dir={state_dir}",
        f"--bin-dir={binaries.bin_dir}",
        f"--timeout={start_timeout}",
        f"--real-nodes={real_nodes}",
        *(f"--image={image}" for image in node_images),
    ]
    log = str(state_dir / SUPERVISOR_LOG)
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=file_actions, setsid=True)


def wait_until_settled(*, state_dir: Path, pid: int, timeout: float) -> ClusterState | None:
    """Wait until supervisor ``pid`` records ``ready`` or ``failed`` (or exits); return the last state seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(state_dir=state_dir)
        mine = state is not None and state.pid == pid
        if mine and state is not None and state.phase in (PHASE_READY, PHASE_FAILED):
            return state
        if reap(pid) and not process_alive(pid):
            return state if mine else None
        time.sleep(0.2)
    return read_state(state_dir=state_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m gpu_operator.localcluster.supervisor``."""
    parser = argparse.ArgumentParser(description="Run a local Kubernetes control plane until SIGTERM.")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--bin-dir", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT)
    parser.add_argument("--real-nodes", type=int, default=0)
    parser.add_argument("--image", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    if args.bin_dir is not None:
        environ["GPU_OPERATOR_KUBE_BIN_DIR"] = str(args.bin_dir)
    binaries = locate_binaries(required=CONTROL_PLANE, environ=environ)
    return serve(
        state_dir=args.state_dir,
        binaries=binaries,
        detached=True,
        start_timeout=args.timeout,
        real_nodes=args.real_nodes,
        node_images=args.image,
    )


if __name__ == "__main__":
    sys.exit(main())
