"""Leader election on a ``coordination.k8s.io/v1`` Lease, with injectable clocks.

Upstream's Lease name (``53822513.nvidia.com``), 15 s duration, renewed every 5 s. A standby tries
every 2 s, so a crashed leader is replaced within 17 s (controller-runtime's figure). Upstream's
``--leader-lease-renew-deadline`` sets all of it at once (:meth:`LeaseTiming.from_renew_deadline`): the
Lease lasts the deadline and 5 s more, and is renewed and tried for often enough to keep it. The Lease is
read and written through :class:`LeaseStore`, which the ``kube`` layer implements, so this module and
its tests need no API client. Each Lease request gets ``REQUEST_SECONDS``: one held by an API server whose
etcd is away must not wait out a 5 s client timeout. A failed renewal is retried at once while the Lease
is still surely ours (``fresh``: renewed within ``RENEW_DEADLINE``), as controller-runtime retries until
its renew deadline; past it, leadership is given up, because another replica may take the Lease once it
expires and two leaders must never act at the same time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_operator.runtime.loop import Result

log = logging.getLogger(__name__)
LEASE_NAME = "53822513.nvidia.com"
LEASE_API = "coordination.k8s.io/v1"
LEASE_SECONDS = 15
RENEW_SECONDS = 5.0
RETRY_SECONDS = 2.0
#: How long after its last renewal began a leader still acts: the Lease's duration less a standby's retry,
#: so a process that was paused (SIGSTOP, a frozen VM) stops working before anyone else may start.
RENEW_DEADLINE = LEASE_SECONDS - RETRY_SECONDS
#: The most one Lease read or write may take before it is abandoned and tried again (the standby's retry).
REQUEST_SECONDS = RETRY_SECONDS
#: The longest ``--leader-lease-renew-deadline`` taken: a leader that may act an hour after its last renewal
#: leaves the cluster without an operator for that long when its node goes.
MAX_RENEW_DEADLINE = 3600.0
#: The shortest one taken: renewals come at half the deadline, and a shorter one would hammer the API server.
MIN_RENEW_DEADLINE = 1.0
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


class LeaseStore(Protocol):
    """The three calls election needs (``kube.api.Kube`` has them)."""

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Any: ...

    async def apply(self, obj: dict[str, Any]) -> Any: ...

    async def delete(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Any: ...


def _micro(moment: dt.datetime) -> str:
    return moment.strftime(_TIME_FORMAT)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, kw_only=True)
class LeaseTiming:
    """How long the Lease lasts, how often its holder renews it and a standby tries for it."""

    duration: int = LEASE_SECONDS
    renew: float = RENEW_SECONDS
    retry: float = RETRY_SECONDS
    #: How long after its last renewal began a leader still acts (``RENEW_DEADLINE`` by default).
    deadline: float = RENEW_DEADLINE

    @classmethod
    def from_renew_deadline(cls, seconds: float) -> LeaseTiming:
        """Upstream's flag: a leader that could not renew for ``seconds`` stops acting; the Lease lasts 5 s
        longer (what controller-runtime's manager is given there), so nobody else may act before it stops.
        Renewals and a standby's tries come at least twice within the deadline."""
        if not MIN_RENEW_DEADLINE <= seconds <= MAX_RENEW_DEADLINE:
            raise ValueError(f"the renew deadline must be from {MIN_RENEW_DEADLINE:g} to {MAX_RENEW_DEADLINE:g} s")
        return cls(duration=math.ceil(seconds + 5), renew=min(RENEW_SECONDS, seconds / 2),
                   retry=min(RETRY_SECONDS, seconds / 2), deadline=seconds)  # fmt: skip


def default_identity() -> str:
    # Unique per instance: two operators in one process (simulated operator pods) must not share a Lease.
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class LeaderElection:
    """Hold the Lease while ``leading`` is set; :meth:`step` is the work of the ``lease`` loop."""

    store: LeaseStore
    namespace: str
    identity: str = field(default_factory=default_identity)
    #: The operator's own pod (name, uid): the Lease's owner, so it goes when the pod does (``helm
    #: uninstall`` removes the RBAC that would let a terminating operator delete it itself).
    owner_pod: tuple[str, str] | None = None
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    on_elected: Callable[[], None] | None = None  # a new leader reconciles at once
    wall: Callable[[], dt.datetime] = _utcnow
    monotonic: Callable[[], float] = time.monotonic
    renewed_at: float = 0.0  # monotonic time at which the last successful write began
    acquired: str = ""  # acquireTime, sent with every renewal (an apply that omits a field removes it)
    lease_name: str = LEASE_NAME  # the network operator holds its own (upstream's ID)
    timing: LeaseTiming = field(default_factory=LeaseTiming)

    @property
    def held(self) -> bool:
        return self.leading.is_set()

    def fresh(self) -> bool:
        """Held, and renewed recently enough that no other replica can hold the Lease yet.

        ``leading`` alone is not enough: a process paused past the Lease's duration wakes with it still
        set, and its work loops may run before the ``lease`` loop has looked. They check this first.
        """
        return self.held and self.monotonic() - self.renewed_at < self.timing.deadline

    async def step(self) -> Result:
        """Acquire or renew once; come back in ``timing.renew`` s while leading, ``timing.retry`` while standing by."""
        was = self.held
        try:
            async with asyncio.timeout(min(REQUEST_SECONDS, self.timing.retry)):
                held = await self.try_acquire()
        except Exception:
            if not self.fresh():  # still ours for a while: keep working, and retry on the loop's backoff
                self._follow(f"the Lease could not be renewed within {self.timing.deadline:g} s")
            raise  # the loop logs, counts and retries it
        if held and not was:
            log.info("became leader (%s)", self.identity)
            if self.on_elected is not None:
                self.on_elected()
        elif was and not held:
            log.warning("lost leadership (another replica holds the Lease); work stops until it is ours again")
        return Result(after=self.timing.renew if held else self.timing.retry)

    def _follow(self, why: str) -> None:
        if self.leading.is_set():
            log.warning("lost leadership (%s); work stops until the Lease is ours again", why)
            self.leading.clear()

    async def try_acquire(self) -> bool:
        now = self.wall()
        if self.held and self.monotonic() - self.renewed_at < self.timing.duration - self.timing.renew:
            # Renewed well within the lease's duration: nobody can have taken it since, so renewing is
            # one write, no read (an idle operator's Lease costs 12 requests a minute, not 24).
            started = self.monotonic()
            await self.store.apply(self._body(now))
            self.renewed_at = started
            return True
        lease = await self.store.get(LEASE_API, "Lease", self.lease_name, namespace=self.namespace)
        spec = (lease or {}).get("spec") or {}
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if lease and holder and holder != self.identity and renewed:
            last = dt.datetime.strptime(renewed, _TIME_FORMAT).replace(tzinfo=dt.UTC)
            if (now - last).total_seconds() < int(spec.get("leaseDurationSeconds", self.timing.duration)):
                self.leading.clear()
                return False
        if holder != self.identity or not self.acquired:  # a new holding (or ours, from before a restart)
            self.acquired = (str(spec.get("acquireTime") or "") if holder == self.identity else "") or _micro(now)
        started = self.monotonic()
        await self.store.apply(self._body(now))
        self.renewed_at = started
        self.leading.set()
        return True

    def _body(self, now: dt.datetime) -> dict[str, Any]:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.duration,
            "acquireTime": self.acquired,
            "renewTime": _micro(now),
        }
        metadata: dict[str, Any] = {"name": self.lease_name, "namespace": self.namespace}
        if self.owner_pod is not None:
            name, uid = self.owner_pod
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}

    async def release(self) -> None:
        """Give the Lease up on a clean stop, so a standby takes over at once rather than when it expires."""
        if self.held:
            try:
                await self.store.delete(LEASE_API, "Lease", self.lease_name, namespace=self.namespace)
            except Exception as error:  # stopping anyway; the Lease then simply expires
                log.info("could not release the Lease (it expires by itself): %s", error)
            self.leading.clear()
