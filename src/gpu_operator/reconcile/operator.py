"""The operator process: leader election, informers that only say "look again", and the requeue loops.

Informers (``reconcile.caches``) keep ClusterPolicies, NVIDIADrivers, Nodes, the operator's
DaemonSets and the driver and validator pods in memory; their changes carry no work, they only wake
a work key, so a burst of a thousand node updates costs one pass. Two keys run side by side: the
policy reconciler (:func:`reconcile_once`) and the driver-upgrade controller (:func:`upgrade_pass`).
Between events each requeues on its own interval (the reconciler 5 s while not ready) and retries
failures with a backoff of 100 ms doubling to 3 s, as upstream. Leadership is a
``coordination.k8s.io/v1`` Lease (upstream's name ``53822513.nvidia.com``): 15 s duration, renewed
every 5 s; a follower keeps its caches warm and does no work until it holds the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from lightkube import ApiError, AsyncClient

from gpu_operator.kube.api import Kube
from gpu_operator.kube.informer import wait_synced
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.clusterpolicy import Outcome, reconcile_once
from gpu_operator.render import OperatorSettings
from gpu_operator.upgrade.controller import UpgradeOutcome, upgrade_pass
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS

log = logging.getLogger(__name__)
LEASE_NAME = "53822513.nvidia.com"
LEASE_SECONDS = 15
RENEW_SECONDS = 5.0
# A standby tries this often, so a crashed leader is replaced within LEASE_SECONDS + RETRY_SECONDS (17 s,
# controller-runtime's figure); only standbys pay for it, the leader renews every RENEW_SECONDS.
RETRY_SECONDS = 2.0
IDLE_RESYNC = 60.0  # a safety net when nothing happens; events do the real work
SYNC_TIMEOUT = 30.0  # seconds to wait for the caches before working without the missing ones
COALESCE = 0.2  # seconds a woken reconciler waits for the rest of a burst (a spec change touches many objects)
# An upgrade pass reads only caches and acts on one step per node: it reacts at once to the pod or node
# change that woke it, and waits just long enough to batch the writes of one wave.
UPGRADE_COALESCE = 0.05


def _micro(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElection:
    """Hold the Lease while ``held`` is True; give it up on stop."""

    kube: Kube
    namespace: str
    # Unique per instance: two operators in one process (simulated operator pods) must not share a Lease.
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    #: The operator's own pod (name, uid): the Lease's owner, so it goes when the pod does (``helm
    #: uninstall`` removes the RBAC that would let a terminating operator delete it itself).
    owner_pod: tuple[str, str] | None = None
    held: bool = False
    renewed_at: float = 0.0  # monotonic time of the last successful write
    acquired: str = ""  # acquireTime, sent with every renewal (an apply that omits a field removes it)

    async def try_acquire(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        if self.held and time.monotonic() - self.renewed_at < LEASE_SECONDS - RENEW_SECONDS:
            # Renewed well within the lease's duration: nobody can have taken it since, so renewing is
            # one write, no read (an idle operator's Lease costs 12 requests a minute, not 24).
            await self.kube.apply(self._body(now))
            self.renewed_at = time.monotonic()
            return True
        lease = await self.kube.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace=self.namespace)
        spec = (lease or {}).get("spec") or {}
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if lease and holder and holder != self.identity and renewed:
            last = dt.datetime.strptime(renewed, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
            if (now - last).total_seconds() < int(spec.get("leaseDurationSeconds", LEASE_SECONDS)):
                self.held = False
                return False
        if holder != self.identity or not self.acquired:  # a new holding (or ours, from before a restart)
            self.acquired = (str(spec.get("acquireTime") or "") if holder == self.identity else "") or _micro(now)
        await self.kube.apply(self._body(now))
        self.held, self.renewed_at = True, time.monotonic()
        return True

    def _body(self, now: dt.datetime) -> dict[str, Any]:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": self.acquired,
            "renewTime": _micro(now),
        }
        metadata: dict[str, Any] = {"name": LEASE_NAME, "namespace": self.namespace}
        if self.owner_pod is not None:
            name, uid = self.owner_pod
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    async def release(self) -> None:
        if self.held:
            with contextlib.suppress(ApiError):
                await self.kube.delete("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace=self.namespace)
            self.held = False


@dataclass
class Wakes:
    """One event per work key: a watch event wakes every key (each decides for itself what changed)."""

    events: tuple[asyncio.Event, ...] = field(default_factory=lambda: (asyncio.Event(), asyncio.Event()))

    def set(self) -> None:
        for event in self.events:
            event.set()


@dataclass
class Operator:
    """Runs :func:`reconcile_once` whenever something may have changed, while leading."""

    client: AsyncClient
    namespace: str
    settings: OperatorSettings
    on_outcome: Callable[[Outcome], Awaitable[None]] | None = None
    passes: int = 0
    failures: int = 0
    last: Outcome | None = None
    api_requests: int = 0
    upgrades: UpgradeOutcome | None = None
    upgrade_passes: int = 0
    # Seconds each upgrade pass took (snapshot + plan + execute): the controller's own overhead (benchmarks).
    upgrade_pass_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    max_driver_restarts: int = MAX_DRIVER_RESTARTS
    kube: Kube | None = None  # while running: the operator's API access and its caches
    pod: tuple[str, str] | None = None  # (name, uid) of the operator's pod, when it runs in one

    async def run(self, *, stop: asyncio.Event, leader_election: bool = True) -> None:
        wakes = Wakes()
        wake, upgrade_wake = wakes.events
        informers = operator_informers(
            self.client, namespace=self.namespace, wake_all=wakes.set, wake_reconciler=wake.set,
            wake_upgrade=upgrade_wake.set,
        )  # fmt: skip
        kube = Kube(self.client, informers=informers)
        self.kube = kube
        election = LeaderElection(kube=kube, namespace=self.namespace, owner_pod=self.pod)
        watches = [asyncio.create_task(informer.run(stop=stop)) for informer in informers]
        leading = asyncio.Event()
        backoff, delay = 0.1, 0.0
        try:
            await wait_synced(informers, stop=stop, timeout=SYNC_TIMEOUT)
            if leader_election:
                lease = self._hold_lease(election, leading=leading, wakes=wakes, stop=stop)
                watches.append(asyncio.create_task(lease))
            else:
                leading.set()
            # The driver-upgrade controller is its own work key (upstream's "driver-upgrade"), on its own clock.
            upgrades = self._upgrade_loop(kube, leading=leading, wake=upgrade_wake, stop=stop)
            watches.append(asyncio.create_task(upgrades))
            while not stop.is_set():
                if not leading.is_set():
                    await self._sleep(stop, wake=wake, seconds=RENEW_SECONDS)
                    continue
                wake.clear()
                try:
                    self.last = await reconcile_once(kube, namespace=self.namespace, operator=self.settings)
                    self.passes += 1
                    self.api_requests = kube.requests
                    backoff = 0.1
                    status = self.last.status
                    delay = status.requeue_after if status and status.requeue_after else IDLE_RESYNC
                    if status is not None and status.backoff:
                        delay, backoff = backoff, min(backoff * 2, 3.0)
                    if self.on_outcome is not None:
                        await self.on_outcome(self.last)
                except (ApiError, OSError) as exc:
                    self.failures += 1
                    log.warning("reconcile failed, retrying in %.1f s: %s", backoff, exc)
                    delay, backoff = backoff, min(backoff * 2, 3.0)
                await self._sleep(stop, wake=wake, seconds=delay)
        finally:
            self.kube = None
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            if leader_election:
                await election.release()

    async def _upgrade_loop(
        self, kube: Kube, *, leading: asyncio.Event, wake: asyncio.Event, stop: asyncio.Event
    ) -> None:
        """Run upgrade passes while leading: on every wake-up, and every second while a node is mid-upgrade."""
        backoff = 0.1
        while not stop.is_set():
            if not leading.is_set():
                await self._sleep(stop, wake=wake, seconds=RENEW_SECONDS)
                continue
            wake.clear()
            try:
                begun = time.monotonic()
                self.upgrades = await upgrade_pass(
                    kube, namespace=self.namespace, max_driver_restarts=self.max_driver_restarts
                )
                self.upgrade_pass_seconds.append(time.monotonic() - begun)
                self.upgrade_passes += 1
                backoff, delay = 0.1, self.upgrades.requeue_after or IDLE_RESYNC
            except (ApiError, OSError) as exc:
                log.warning("driver upgrade pass failed, retrying in %.1f s: %s", backoff, exc)
                delay, backoff = backoff, min(backoff * 2, 3.0)
            await self._sleep(stop, wake=wake, seconds=delay, coalesce=UPGRADE_COALESCE)

    async def _hold_lease(
        self, election: LeaderElection, *, leading: asyncio.Event, wakes: Wakes, stop: asyncio.Event
    ) -> None:
        """Renew the Lease on its own clock, so an idle operator costs one request per renewal, not a pass."""
        while not stop.is_set():
            try:
                held = await election.try_acquire()
            except (ApiError, OSError) as exc:
                log.warning("lease renewal failed: %s", exc)
                held = False
            if held and not leading.is_set():
                log.info("became leader (%s)", election.identity)
                leading.set()
                wakes.set()  # a new leader reconciles at once
            elif not held and leading.is_set():
                log.warning("lost leadership; reconciling stops until the Lease is ours again")
                leading.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=RENEW_SECONDS if held else RETRY_SECONDS)

    @staticmethod
    async def _sleep(
        stop: asyncio.Event, *, wake: asyncio.Event | None, seconds: float, coalesce: float = COALESCE
    ) -> None:
        waiters = [asyncio.ensure_future(stop.wait())]
        if wake is not None:
            waiters.append(asyncio.ensure_future(wake.wait()))
        done, pending = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if done and not stop.is_set():
            await asyncio.sleep(coalesce)  # a burst of events makes one pass
