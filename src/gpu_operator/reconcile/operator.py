"""The operator process: leader election, watches that only say "look again", and the requeue loop.

Watches (ClusterPolicies, Nodes, the operator's DaemonSets) do not carry work: any event just wakes
the single reconcile key, so a burst of a thousand node updates costs one pass. Between events the
loop requeues on the status' interval (5 s while not ready) and retries failures with a backoff of
100 ms doubling to 3 s, as upstream. Leadership is a ``coordination.k8s.io/v1`` Lease (upstream's name
``53822513.nvidia.com``): 15 s duration, renewed every 5 s; a follower only watches the Lease.
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
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node

from gpu_operator.kube.api import ClusterPolicyResource, Kube, NVIDIADriverResource, changed_nodes, reconcile_digest
from gpu_operator.reconcile.clusterpolicy import Outcome, reconcile_once
from gpu_operator.render import OperatorSettings
from gpu_operator.upgrade.controller import UpgradeOutcome, upgrade_pass
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS

log = logging.getLogger(__name__)
LEASE_NAME = "53822513.nvidia.com"
LEASE_SECONDS = 15
RENEW_SECONDS = 5.0
IDLE_RESYNC = 60.0  # a safety net when nothing happens; events do the real work


def _micro(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElection:
    """Hold the Lease while ``held`` is True; give it up on stop."""

    kube: Kube
    namespace: str
    # Unique per instance: two operators in one process (simulated operator pods) must not share a Lease.
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    held: bool = False

    async def try_acquire(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        lease = await self.kube.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace=self.namespace)
        spec = (lease or {}).get("spec") or {}
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if lease and holder and holder != self.identity and renewed:
            last = dt.datetime.strptime(renewed, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
            if (now - last).total_seconds() < int(spec.get("leaseDurationSeconds", LEASE_SECONDS)):
                self.held = False
                return False
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro(now)},
        }
        if not lease or holder != self.identity:
            body["spec"]["acquireTime"] = _micro(now)
        await self.kube.apply(body)
        self.held = True
        return True

    async def release(self) -> None:
        if self.held:
            with contextlib.suppress(ApiError):
                await self.kube.delete("coordination.k8s.io/v1", "Lease", LEASE_NAME, namespace=self.namespace)
            self.held = False


async def _watch(wakes: Wakes, stream: Callable[[], Any], stop: asyncio.Event, what: str) -> None:
    """Turn every event of a watch into a wake-up; reconnect after errors (the resync covers gaps)."""
    while not stop.is_set():
        try:
            # aclosing: a cancelled watch closes its streaming response now, not when it is collected.
            async with contextlib.aclosing(stream()) as events:
                async for _event in events:
                    wakes.set()
        except (TimeoutError, ApiError, OSError) as exc:
            log.debug("watch %s interrupted: %s", what, exc)
        except Exception as exc:  # httpx stream errors surface as various types
            log.debug("watch %s ended: %s", what, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def _node_events(client: AsyncClient, wakes: Wakes) -> AsyncGenerator[tuple[str, Any], None]:
    """Node changes, sorted by who needs them: every change wakes the upgrade controller; only changes the
    policy reconciler reads wake it too (a rollout's own label writes would otherwise keep it busy)."""
    seen: dict[str, tuple[Any, ...]] = {}
    async with contextlib.aclosing(changed_nodes(client.watch(Node))) as events:
        async for kind, node in events:
            name = node.metadata.name if node.metadata else ""
            digest = reconcile_digest(node)
            if kind == "DELETED" or seen.get(name) != digest:
                seen[name] = digest
                yield kind, node  # _watch wakes every key
            else:
                wakes.events[1].set()  # the upgrade controller's key only


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

    async def run(self, *, stop: asyncio.Event, leader_election: bool = True) -> None:
        kube = Kube(self.client)
        election = LeaderElection(kube=kube, namespace=self.namespace)
        wakes = Wakes()
        wake, upgrade_wake = wakes.events
        watches = [
            asyncio.create_task(
                _watch(wakes, lambda: self.client.watch(ClusterPolicyResource), stop, "clusterpolicies")
            ),
            # Heartbeats are dropped: at a thousand nodes they would keep an idle operator reconciling.
            asyncio.create_task(_watch(wakes, lambda: _node_events(self.client, wakes), stop, "nodes")),
            asyncio.create_task(_watch(wakes, lambda: self.client.watch(NVIDIADriverResource), stop, "nvidiadrivers")),
            asyncio.create_task(
                _watch(wakes, lambda: self.client.watch(DaemonSet, namespace=self.namespace), stop, "daemonsets")
            ),
        ]
        leading = asyncio.Event()
        if leader_election:
            watches.append(asyncio.create_task(self._hold_lease(election, leading=leading, wakes=wakes, stop=stop)))
        else:
            leading.set()
        # The driver-upgrade controller is its own work key (upstream's "driver-upgrade"), on its own clock.
        watches.append(asyncio.create_task(self._upgrade_loop(kube, leading=leading, wake=upgrade_wake, stop=stop)))
        backoff, delay = 0.1, 0.0
        try:
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
            await self._sleep(stop, wake=wake, seconds=delay)

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
                await asyncio.wait_for(stop.wait(), timeout=RENEW_SECONDS)

    @staticmethod
    async def _sleep(stop: asyncio.Event, *, wake: asyncio.Event | None, seconds: float) -> None:
        waiters = [asyncio.ensure_future(stop.wait())]
        if wake is not None:
            waiters.append(asyncio.ensure_future(wake.wait()))
        done, pending = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if done and not stop.is_set():
            await asyncio.sleep(0.2)  # coalesce a burst of events into one pass
