"""The control channel of ``gpu-operator sim up``: request handling, the state file, a socket round trip."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_operator.localcluster.state import process_start_time
from gpu_operator.sim.control.server import ControlError, SimState, handle, read_state, request, serve, write_state


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"op": "reboot"}, "unknown operation 'reboot'"),
        ({"op": "xid", "node": "n9", "gpu": 0, "xid": 79}, "no simulated node 'n9'"),
    ],
)
def test_bad_requests_are_answered(body: dict[str, object], error: str) -> None:
    answer = asyncio.run(handle(body, nodes={}))
    assert answer["ok"] is False
    assert error in answer["error"]


def test_no_simulator_running(state_dir: Path) -> None:
    with pytest.raises(ControlError, match="no simulator is running"):
        request(state_dir=state_dir, body={"op": "status"})


async def _close(server: asyncio.AbstractServer) -> None:
    server.close()  # in the server's own loop: asyncio servers are not thread-safe
    await server.wait_closed()


def test_round_trip_over_the_socket(state_dir: Path) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    socket = state_dir / "control.sock"
    server = asyncio.run_coroutine_threadsafe(serve(path=socket, nodes={}), loop).result(10)
    try:
        pid = os.getpid()
        state = SimState(pid=pid, pid_start=process_start_time(pid), server="https://x", socket=str(socket), nodes=[])
        write_state(state_dir=state_dir, state=state)
        assert read_state(state_dir=state_dir) == state
        assert request(state_dir=state_dir, body={"op": "status"}) == []
        with pytest.raises(ControlError, match="unknown operation"):
            request(state_dir=state_dir, body={"op": "nope"})
    finally:
        asyncio.run_coroutine_threadsafe(_close(server), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
