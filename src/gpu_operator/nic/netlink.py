"""Ask the kernel's RDMA core for its network namespace mode over NETLINK_RDMA (``rdma system show``).

One request (RDMA_NL_NLDEV client, RDMA_NLDEV_CMD_SYS_GET) and one u8 attribute in the answer
(RDMA_NLDEV_SYS_ATTR_NETNS_MODE: 1 shared, 0 exclusive). Kernels or sandboxes without the protocol
refuse the socket (EPROTONOSUPPORT); any failure here is an answer of None, never an exception, so
callers can fall back to what sysfs says. The socket is opened through a factory so tests can hand
in a fake one and open no socket at all.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Protocol

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
RDMA_NLDEV_CMD_SYS_GET = 6
RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66
SYS_GET_TYPE = (RDMA_NL_NLDEV << 10) + RDMA_NLDEV_CMD_SYS_GET
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR, NLMSG_DONE = 2, 3
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_ATTR = struct.Struct("=HH")  # nlattr: length, type
_NLA_TYPE_MASK = 0x3FFF


class NetlinkSocket(Protocol):
    """The part of a socket the query uses."""

    def settimeout(self, value: float | None, /) -> None: ...
    def sendto(self, data: bytes, address: tuple[int, int], /) -> int: ...
    def recv(self, size: int, /) -> bytes: ...
    def close(self) -> None: ...


def open_rdma_socket() -> NetlinkSocket:
    """A NETLINK_RDMA socket; OSError (EPROTONOSUPPORT) where the kernel has none."""
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)


def sys_get_request(*, seq: int) -> bytes:
    """The RDMA_NLDEV_CMD_SYS_GET request (no attributes)."""
    return _HEADER.pack(_HEADER.size, SYS_GET_TYPE, NLM_F_REQUEST | NLM_F_ACK, seq, 0)


def parse_netns_mode(data: bytes) -> str | None:
    """The mode in a reply buffer ("shared"/"exclusive"); None for an error, an ack alone or garbage."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, _seq, _pid = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            return None
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + _HEADER.size)
            if code != 0:
                return None
        elif kind == SYS_GET_TYPE:
            attr = offset + _HEADER.size
            while attr + _ATTR.size <= offset + length:
                attr_len, attr_type = _ATTR.unpack_from(data, attr)
                if attr_len < _ATTR.size:
                    return None
                if attr_type & _NLA_TYPE_MASK == RDMA_NLDEV_SYS_ATTR_NETNS_MODE and attr_len > _ATTR.size:
                    return "shared" if data[attr + _ATTR.size] else "exclusive"
                attr += (attr_len + 3) & ~3
        offset += (length + 3) & ~3
    return None


def query_netns_mode(
    *, open_socket: Callable[[], NetlinkSocket] = open_rdma_socket, timeout: float = 1.0
) -> str | None:
    """The kernel's RDMA netns mode, or None when it cannot be asked or does not say."""
    try:
        sock = open_socket()
    except OSError:
        return None
    try:
        sock.settimeout(timeout)
        sock.sendto(sys_get_request(seq=1), (0, 0))
        return parse_netns_mode(sock.recv(8192))
    except (OSError, struct.error, IndexError):
        return None
    finally:
        with contextlib.suppress(OSError):
            sock.close()
