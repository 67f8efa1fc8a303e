"""One shared heartbeat loop for every simulated node: Lease renewals and node-status updates.

A kubelet renews its Lease every 10 s and posts node status when something changes or every few minutes;
the node-lifecycle controller marks a node unreachable when neither moved within its grace period (50 s on
current releases). Running a thread per node does not scale; this loop wakes twice a second, picks the
nodes whose renewal or status update is due (first deadlines spread at random so a thousand nodes do not
renew in lockstep) and sends those requests concurrently with a bounded number in flight.

The loop never waits for its requests: one slow status update (an API server busy starting thousands of
pods) must not hold back the next tick's Lease renewals, as it would if each tick awaited all of its
requests. A node with a request of one kind still in flight gets no second one of that kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_operator.sim.objects import LEASE_NAMESPACE, lease_renewal

log = logging.getLogger(__name__)
LEASE_INTERVAL = 10.0
STATUS_INTERVAL = 40.0
TICK = 0.5


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(kw_only=True)
class Beat:
    """Heartbeat state of one node. ``status_body`` builds the node-status patch when one is due."""

    name: str
    status_body: Callable[[dt.datetime], dict[str, Any]]
    #: Called after each status update the API server accepted.
    on_status: Callable[[], None] | None = None
    beating: bool = True
    next_lease: float = 0.0
    next_status: float = 0.0
    sending: set[str] = field(default_factory=set)  # "lease" and/or "status": a request in flight


@dataclass
class HeartbeatStats:
    leases: int = 0
    statuses: int = 0
    errors: int = 0
    last_error: str = ""
    per_node_errors: dict[str, int] = field(default_factory=dict)


class Patcher(Protocol):
    """The one call the heartbeat makes (:meth:`gpu_operator.kube.restclient.ApiClient.patch`)."""

    async def patch(self, path: str, body: Any, *, kind: str = "merge", want: bool = False) -> dict[str, Any]: ...


class Heartbeat:
    """Keeps registered nodes' Leases and Ready conditions fresh."""

    def __init__(
        self,
        *,
        api: Patcher,
        lease_interval: float = LEASE_INTERVAL,
        status_interval: float = STATUS_INTERVAL,
        concurrency: int = 8,
    ) -> None:
        self.api = api
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self._beats: dict[str, Beat] = {}
        self._limit = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self.stats = HeartbeatStats()

    def add(self, beat: Beat, *, now: float | None = None) -> None:
        """Start beating for a node that was just registered (its Lease and status are fresh)."""
        moment = time.monotonic() if now is None else now
        beat.next_lease = moment + self.lease_interval * random.uniform(0.5, 1.0)
        beat.next_status = moment + self.status_interval * random.uniform(0.5, 1.0)
        self._beats[beat.name] = beat

    def remove(self, name: str) -> None:
        self._beats.pop(name, None)

    def get(self, name: str) -> Beat | None:
        return self._beats.get(name)

    def status_now(self, name: str) -> None:
        """Send ``name``'s status on the next tick (after a Ready change)."""
        beat = self._beats.get(name)
        if beat is not None:
            beat.next_status = 0.0
            self._wake.set()

    def due(self, moment: float) -> tuple[list[Beat], list[Beat]]:
        """The nodes whose Lease renewal and status update are due at ``moment``; schedules the next ones."""
        leases: list[Beat] = []
        statuses: list[Beat] = []
        for beat in self._beats.values():
            if not beat.beating:
                continue
            if beat.next_lease <= moment and "lease" not in beat.sending:
                beat.next_lease = moment + self.lease_interval
                leases.append(beat)
            if beat.next_status <= moment and "status" not in beat.sending:
                beat.next_status = moment + self.status_interval
                statuses.append(beat)
        return leases, statuses

    def send_due(self, moment: float) -> list[asyncio.Task[None]]:
        """Start every request due at ``moment`` (bounded by the semaphore) and return at once."""
        leases, statuses = self.due(moment)
        started = [self._send(b, "lease", self._renew(b)) for b in leases]
        return started + [self._send(b, "status", self._status(b)) for b in statuses]

    def _send(self, beat: Beat, kind: str, request: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        beat.sending.add(kind)
        task = asyncio.create_task(request, name=f"heartbeat-{kind}-{beat.name}")
        self._inflight.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            beat.sending.discard(kind)

        task.add_done_callback(done)
        return task

    async def beat_once(self, moment: float) -> None:
        """Send every request due at ``moment`` and wait for them (tests; the loop does not wait)."""
        await asyncio.gather(*self.send_due(moment))

    async def run(self) -> None:
        """Loop until cancelled; requests still in flight are cancelled with it."""
        try:
            while True:
                self.send_due(time.monotonic())
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), TICK)
        finally:
            pending = list(self._inflight)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _failed(self, beat: Beat, what: str, error: Exception) -> None:
        self.stats.errors += 1
        self.stats.per_node_errors[beat.name] = self.stats.per_node_errors.get(beat.name, 0) + 1
        self.stats.last_error = f"{beat.name}: {what}: {error}"
        log.warning("heartbeat %s: %s failed: %s", beat.name, what, error)

    def _current(self, beat: Beat) -> bool:
        # A request may wait for a slot while its node is being removed: skip it then (its Lease is gone).
        return self._beats.get(beat.name) is beat and beat.beating

    async def _renew(self, beat: Beat) -> None:
        async with self._limit:
            if not self._current(beat):
                return
            try:
                await self.api.patch(
                    f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{beat.name}",
                    lease_renewal(now_utc()),
                )
                self.stats.leases += 1
            except Exception as error:  # one failure must not stop the loop (transport or API)
                beat.next_lease = time.monotonic() + 1.0
                self._failed(beat, "lease renewal", error)

    async def _status(self, beat: Beat) -> None:
        async with self._limit:
            if not self._current(beat):
                return
            try:
                await self.api.patch(f"/api/v1/nodes/{beat.name}/status", beat.status_body(now_utc()), kind="strategic")
                self.stats.statuses += 1
                if beat.on_status is not None:
                    beat.on_status()
            except Exception as error:  # as above
                beat.next_status = time.monotonic() + 2.0
                self._failed(beat, "status update", error)
