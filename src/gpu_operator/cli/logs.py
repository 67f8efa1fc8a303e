"""Logging settings shared by the long-running commands (operator, agents, simulator, demo)."""

from __future__ import annotations

import logging

#: The HTTP client libraries log every request at INFO: thousands of lines an hour from watches,
#: the Lease and node polls. lightkube's client logs as "httpx2".
HTTP_LOGGERS = ("httpx", "httpx2", "httpcore")


def quiet_http_logs() -> None:
    """Keep the HTTP clients to warnings and errors."""
    for name in HTTP_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
