"""Unit-tier rules: no test opens a socket (the 2-second timeout is set in ``tests/conftest.py``).

Tests that talk gRPC or HTTP over a socket belong in ``tests/contract``. Only ``connect``,
``connect_ex`` and ``bind`` are refused: ``socket.socketpair()`` keeps working, since every asyncio
event loop makes one for itself. gRPC opens its sockets in C, so its servers and channels are refused
where they are made.
"""

from __future__ import annotations

import socket
from typing import Any

import grpc
import grpc.aio
import pytest

MESSAGE = "unit tests open no sockets: move this test to tests/contract"
_FAMILIES = {socket.AF_INET, socket.AF_INET6, socket.AF_UNIX}


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError(MESSAGE)


def _guarded(name: str) -> Any:
    original = getattr(socket.socket, name)

    def guarded(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if self.family in _FAMILIES:
            raise RuntimeError(MESSAGE)
        return original(self, *args, **kwargs)

    return guarded


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, _guarded(name))
    for module, name in (
        (grpc, "server"),
        (grpc, "insecure_channel"),
        (grpc, "secure_channel"),
        (grpc.aio, "server"),
        (grpc.aio, "insecure_channel"),
        (grpc.aio, "secure_channel"),
    ):
        monkeypatch.setattr(module, name, _refuse)
