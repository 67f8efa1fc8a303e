"""The control channel of a running ``gpu-operator sim up``: a unix socket in its state directory.

``sim up`` records itself in ``<state dir>/sim.json`` (pid and start time, nodes, socket path) and serves
``<state dir>/control.sock``: one JSON request per connection, one JSON answer (``{"ok": true, "result":
...}`` or ``{"ok": false, "error": ...}``). ``gpu-operator sim fault ...`` and ``sim status`` are clients.
Operations: ``status``, ``xid``, ``lose-gpu``, ``recover-gpu``, ``kubelet-restart``, ``not-ready``,
``ready``, ``crash``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_operator.localcluster.state import process_alive, process_start_time
from gpu_operator.sim.control import faults
from gpu_operator.sim.kubelet.node import SimNode

JSON = dict[str, Any]
STATE_FILE = "sim.json"
SOCKET_FILE = "control.sock"
Handler = Callable[[SimNode, JSON], Awaitable[str]]


class ControlError(RuntimeError):
    """The running simulator refused or could not be reached; the message says why."""


def default_state_dir() -> Path:
    """``$XDG_CACHE_HOME/gpu-operator/sim`` (``~/.cache/gpu-operator/sim`` by default)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpu-operator" / "sim"


@dataclass(frozen=True, kw_only=True)
class SimState:
    """Content of ``sim.json``."""

    pid: int
    pid_start: str | None
    server: str
    socket: str
    nodes: list[str]

    def alive(self) -> bool:
        return process_alive(self.pid) and process_start_time(self.pid) == self.pid_start


def write_state(*, state_dir: Path, state: SimState) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    temporary = state_dir / f".{STATE_FILE}.{os.getpid()}"
    temporary.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, state_dir / STATE_FILE)


def read_state(*, state_dir: Path) -> SimState | None:
    try:
        return SimState(**json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _gpu(request: JSON) -> int:
    return int(request["gpu"])


HANDLERS: dict[str, Handler] = {
    "xid": lambda n, r: faults.inject_xid(n, gpu=_gpu(r), xid=int(r["xid"]), gi_id=r.get("gi_id")),
    "lose-gpu": lambda n, r: faults.lose_gpu(n, gpu=_gpu(r)),
    "recover-gpu": lambda n, r: faults.recover_gpu(n, gpu=_gpu(r)),
    "kubelet-restart": lambda n, r: faults.restart_kubelet(n),
    "not-ready": lambda n, r: faults.set_ready(n, ready=False, heartbeats=not r.get("stop_heartbeats", False)),
    "ready": lambda n, r: faults.set_ready(n, ready=True, heartbeats=True),
    "ofed": lambda n, r: faults.ofed_fault(n, mode=str(r["mode"]), image_contains=str(r.get("image_contains") or "")),
    "crash": lambda n, r: faults.crash(
        n, namespace=r.get("namespace"), pod=r.get("pod"), container=r.get("container"), program=r.get("program")
    ),
}


def node_rows(nodes: Mapping[str, SimNode]) -> list[JSON]:
    """One row per node for `sim status`."""
    return [
        {
            "name": node.name,
            "profile": node.profile.name,
            "nics": f"{node.shape.nic_count} x {node.shape.nic_model}" if node.shape.nic_count else "",
            "ready": node.ready,
            "heartbeats": node.beat.beating,
            "pods": len(node.workers),
            "resources": {name: list(counts) for name, counts in node.extended.items()},
        }
        for node in nodes.values()
    ]


async def handle(request: JSON, *, nodes: Mapping[str, SimNode]) -> JSON:
    """Answer one control request."""
    op = str(request.get("op", ""))
    try:
        if op == "status":
            return {"ok": True, "result": node_rows(nodes)}
        if op not in HANDLERS:
            return {"ok": False, "error": f"unknown operation {op!r}; known: status, {', '.join(sorted(HANDLERS))}"}
        name = str(request.get("node", ""))
        if name not in nodes:
            return {"ok": False, "error": f"no simulated node {name!r}; nodes: {', '.join(sorted(nodes))}"}
        return {"ok": True, "result": await HANDLERS[op](nodes[name], request)}
    except (faults.FaultError, KeyError, ValueError, TypeError) as error:
        return {"ok": False, "error": f"{op}: {error}"}


async def serve(*, path: Path, nodes: Mapping[str, SimNode]) -> asyncio.AbstractServer:
    """Serve the control socket in the running loop."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                answer = await handle(json.loads(line), nodes=nodes)
            except ValueError as error:
                answer = {"ok": False, "error": f"bad request: {error}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    path.unlink(missing_ok=True)
    return await asyncio.start_unix_server(connection, path=str(path))


def request(*, state_dir: Path, body: JSON, timeout: float = 30.0) -> Any:
    """Send ``body`` to the simulator running with ``state_dir``; its ``result``, or ControlError."""
    state = read_state(state_dir=state_dir)
    if state is None or not state.alive():
        raise ControlError(f"no simulator is running (state dir {state_dir}); start one with `gpu-operator sim up`")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(state.socket)
            conn.sendall(json.dumps(body).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as error:
            raise ControlError(f"cannot reach the simulator at {state.socket}: {error}") from error
    answer: JSON = json.loads(data or b"{}")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "no answer")))
    return answer.get("result")
