"""Contract checks for health recovery: an XID that asks for a GPU reset, then the reset, yields a
recovered event (``reset=True``) on every backend; an XID that asks for nothing yields none.

Registered into ``checks.CHECKS`` at the end of ``checks``; plain asserts, like the other checks.
"""

from __future__ import annotations

import time

from tests.contract.checks import PROMPT_S, Harness

QUIET_S = 1.2  # longer than the NVML backend's wait slice: anything due would have come by then


def _events(h: Harness, timeout: float) -> list[tuple[str, int | None, bool, bool]]:
    return [(e.uuid, e.xid, e.recovered, e.reset) for e in h.backend.wait_health_events(timeout=timeout)]


def check_reset_recovers(h: Harness) -> None:
    backend = h.backend
    uuid = backend.devices()[0].uuid
    backend.wait_health_events(timeout=0)

    h.inject_xid(0, 13)  # an application error: the driver asks for no recovery action
    assert _events(h, 5) == [(uuid, 13, False, False)]
    h.reset_gpu(0)
    assert _events(h, QUIET_S) == [], "a reset nobody asked for recovers nothing"

    h.inject_xid(0, 48)  # double-bit ECC: the driver asks for a GPU reset
    assert _events(h, 5) == [(uuid, 48, False, False)]
    assert _events(h, QUIET_S) == [], "nothing recovers before the reset"
    start = time.monotonic()
    h.reset_gpu(0)
    events = list(backend.wait_health_events(timeout=5))
    elapsed = time.monotonic() - start
    assert [(e.uuid, e.recovered, e.reset, e.xid) for e in events] == [(uuid, True, True, None)], events
    assert "XID 48" in events[0].message, events[0].message
    assert elapsed < PROMPT_S, f"the recovery came {elapsed:.2f} s after the reset"
    h.reset_gpu(0)
    assert _events(h, QUIET_S) == [], "a second reset has nothing left to clear"
