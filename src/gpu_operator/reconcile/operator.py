"""The operator process: its informers, work keys and Lease, wired on the one runtime (``gpu_operator.runtime``).

Informers (``reconcile.caches``) keep ClusterPolicies, NVIDIADrivers, Nodes, the operator's
DaemonSets, the driver and validator pods and the Node Events in memory; their changes carry no work,
they only wake a work key, so a burst of a thousand node updates costs one pass. Three keys run side
by side as :class:`~gpu_operator.runtime.loop.Loop` objects: ``reconcile`` (:func:`reconcile_once`, the
policies, NVIDIADrivers and node labels), ``driver-upgrade`` (:func:`upgrade_pass`) and ``remediation``
(:func:`~gpu_operator.remediation.controller.remediation_pass`, light remediation after XID errors). Between events each
requeues on its own interval (the reconciler 5 s while not ready); a failed pass, whatever it raised,
is logged, counted in ``/metrics`` and retried with a backoff of 100 ms doubling to 3 s, as upstream
(or after the API server's Retry-After). Leadership is the ``lease`` loop
(:class:`~gpu_operator.runtime.leader.LeaderElection`); a follower keeps its caches warm and does no
work until it holds the Lease. Every task runs under one :class:`~gpu_operator.runtime.supervisor.Supervisor`:
if one dies, :attr:`Operator.healthy` turns False and ``/healthz`` fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpu_operator.kube.api import Kube
from gpu_operator.kube.connect import async_client
from gpu_operator.kube.informer import JSON, Informer
from gpu_operator.kube.informer import RETRY_SECONDS as INFORMER_RETRY_SECONDS
from gpu_operator.kube.typed import AsyncClient
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.clusterpolicy import Outcome, reconcile_once
from gpu_operator.reconcile.process import run_operator
from gpu_operator.remediation.controller import RemediationMetrics, RemediationOutcome, remediation_pass
from gpu_operator.render import OperatorSettings
from gpu_operator.runtime.backoff import Backoff
from gpu_operator.runtime.leader import (
    LEASE_NAME,
    LEASE_SECONDS,
    RETRY_SECONDS,
    LeaderElection,
    LeaseTiming,
)
from gpu_operator.runtime.loop import Loop, LoopStats, Result
from gpu_operator.runtime.supervisor import Supervisor
from gpu_operator.runtime.threads import LoopThread
from gpu_operator.upgrade.controller import UpgradeOutcome, upgrade_pass
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS

__all__ = [
    "LEASE_NAME",
    "LEASE_SECONDS",
    "RETRY_SECONDS",
    "LeaderElection",
    "Operator",
    "OperatorThread",
    "upgrade_pass",
]

log = logging.getLogger(__name__)
IDLE_RESYNC = 60.0  # a safety net when nothing happens; events do the real work
SYNC_TIMEOUT = 30.0  # seconds to wait for the caches before working without the missing ones
COALESCE = 0.2  # seconds a woken reconciler waits for the rest of a burst (a spec change touches many objects)
# An upgrade pass reads only caches and acts on one step per node: it reacts at once to the pod or node
# change that woke it, and waits just long enough to batch the writes of one wave.
UPGRADE_COALESCE = 0.05
RECONCILE_PACE = 0.0  # the reconciler's passes are not paced: spec changes and readiness go out at once
# While a fleet's driver pods and nodes change one after another (a first rollout, a wave), at most one
# upgrade pass a second: each reads every managed node, and a wave's steps wait on pods anyway.
UPGRADE_PACE = 1.0
# Remediation passes read cached Nodes and Events; a storm of XID Events costs one pass a second.
REMEDIATION_COALESCE, REMEDIATION_PACE = 0.2, 1.0
RECONCILE, UPGRADE, REMEDIATION, LEASE = "reconcile", "driver-upgrade", "remediation", "lease"


@dataclass
class Operator:
    """Runs :func:`reconcile_once` and :func:`upgrade_pass` whenever something may have changed, while leading."""

    client: AsyncClient  # lightkube's, from kube.connect
    namespace: str
    settings: OperatorSettings
    on_outcome: Callable[[Outcome], Awaitable[None]] | None = None
    last: Outcome | None = None
    api_requests: int = 0
    upgrades: UpgradeOutcome | None = None
    # Seconds each upgrade pass took (snapshot + plan + execute): the controller's own overhead (benchmarks).
    upgrade_pass_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    max_driver_restarts: int = MAX_DRIVER_RESTARTS
    kube: Kube | None = None  # while running: the operator's API access and its caches
    pod: tuple[str, str] | None = None  # (name, uid) of the operator's pod, when it runs in one
    backoff_seconds: tuple[float, float] = (0.1, 3.0)  # first and longest retry delay after a failed pass
    informer_retry_seconds: float = INFORMER_RETRY_SECONDS  # first delay before a cache lists again
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)  # --leader-lease-renew-deadline
    supervisor: Supervisor | None = None  # while running
    reconcile_stats: LoopStats = field(default_factory=LoopStats)
    upgrade_stats: LoopStats = field(default_factory=LoopStats)
    remediation_stats: LoopStats = field(default_factory=LoopStats)
    remediation: RemediationOutcome | None = None
    remediation_metrics: RemediationMetrics = field(default_factory=RemediationMetrics)
    _events: Informer | None = None  # while running: the Node Events cache
    clock: Callable[[], float] = time.time  # the upgrade planner's "now" (maintenance windows, timeouts)

    @property
    def passes(self) -> int:
        return self.reconcile_stats.passes

    @property
    def failures(self) -> int:
        return self.reconcile_stats.failures

    @property
    def upgrade_passes(self) -> int:
        return self.upgrade_stats.passes

    @property
    def healthy(self) -> bool:
        """False once a task of the running operator died (what ``/healthz`` answers)."""
        return self.supervisor is None or self.supervisor.healthy

    def metric_lines(self) -> list[str]:
        loops = self.supervisor.metric_lines() if self.supervisor is not None else []
        rollout = self.upgrades.metric_lines() if self.upgrades is not None else []
        return [*loops, *self.remediation_metrics.lines(), *rollout]

    def _running_kube(self) -> Kube:
        if self.kube is None:
            raise RuntimeError("the operator is not running")  # passes run only inside run()
        return self.kube

    def _backoff(self) -> Backoff:
        first, longest = self.backoff_seconds
        return Backoff(initial=first, ceiling=longest)

    async def run(self, *, stop: asyncio.Event, leader_election: bool = True) -> None:
        supervisor = Supervisor(stop=asyncio.Event())
        self.supervisor = supervisor
        reconcile = Loop(
            name=RECONCILE, work=self._reconcile, idle=IDLE_RESYNC, coalesce=COALESCE, pace=RECONCILE_PACE,
            gate_poll=self.lease_timing.renew, backoff=self._backoff(), stats=self.reconcile_stats,
        )  # fmt: skip
        upgrade = Loop(
            name=UPGRADE, work=self._upgrade, idle=IDLE_RESYNC, coalesce=UPGRADE_COALESCE, pace=UPGRADE_PACE,
            gate_poll=self.lease_timing.renew, backoff=self._backoff(), stats=self.upgrade_stats,
        )  # fmt: skip

        remediation = Loop(
            name=REMEDIATION, work=self._remediate, idle=IDLE_RESYNC, coalesce=REMEDIATION_COALESCE,
            pace=REMEDIATION_PACE, gate_poll=self.lease_timing.renew, backoff=self._backoff(),
            stats=self.remediation_stats,
        )  # fmt: skip

        def wake_all() -> None:
            reconcile.wake.set()
            upgrade.wake.set()
            remediation.wake.set()

        informers = operator_informers(
            self.client, namespace=self.namespace, wake_all=wake_all, wake_reconciler=reconcile.wake.set,
            wake_upgrade=upgrade.wake.set, wake_remediation=remediation.wake.set,
        )  # fmt: skip
        self._events = next(i for i in informers if i.kind == "Event")
        kube = Kube(self.client, informers=informers)
        self.kube = kube
        election = LeaderElection(store=kube, namespace=self.namespace, owner_pod=self.pod, on_elected=wake_all,
                                  timing=self.lease_timing)  # fmt: skip
        for informer in informers:
            informer.retry_seconds = self.informer_retry_seconds
        try:
            await run_operator(
                supervisor=supervisor, informers=informers, election=election if leader_election else None,
                loops=(reconcile, upgrade, remediation), stop=stop, sync_timeout=SYNC_TIMEOUT, backoff=self._backoff(),
            )  # fmt: skip
        finally:
            self.kube = None
            self._events = None

    async def _reconcile(self) -> Result:
        kube = self._running_kube()
        self.last = await reconcile_once(kube, namespace=self.namespace, operator=self.settings)
        self.api_requests = kube.requests
        if self.on_outcome is not None:
            await self.on_outcome(self.last)
        status = self.last.status
        if status is not None and status.backoff:
            return Result(backoff=True)
        return Result(after=status.requeue_after if status and status.requeue_after else None)

    async def _upgrade(self) -> Result:
        begun = time.monotonic()
        self.upgrades = await upgrade_pass(
            self._running_kube(),
            namespace=self.namespace,
            max_driver_restarts=self.max_driver_restarts,
            now=self.clock(),
        )
        self.upgrade_pass_seconds.append(time.monotonic() - begun)
        return Result(after=self.upgrades.requeue_after or None)

    def _cached_events(self) -> list[JSON] | None:
        events = self._events
        return list(events.items.values()) if events is not None and events.synced.is_set() else None

    async def _remediate(self) -> Result:
        self.remediation = await remediation_pass(
            self._running_kube(), now=self.clock(), metrics=self.remediation_metrics, cached_events=self._cached_events
        )
        return Result(after=self.remediation.requeue_after)


class OperatorThread(LoopThread):
    """The operator in a thread of this process, as in its own pod (the demo and the tests run it so):
    a fresh client and :class:`Operator` per start, leader election on; ``operator`` is the running one."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        namespace: str,
        max_driver_restarts: int | None = None,
        settings: OperatorSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.max_driver_restarts = max_driver_restarts
        self.clock = clock
        self.settings = settings or OperatorSettings()
        self.operator: Operator | None = None
        super().__init__(name="gpu-operator", main=self._operate)

    async def _operate(self, stop: asyncio.Event) -> None:
        client = async_client(kubeconfig=self.kubeconfig)
        self.operator = Operator(client=client, namespace=self.namespace, settings=self.settings, clock=self.clock)
        if self.max_driver_restarts is not None:
            self.operator.max_driver_restarts = self.max_driver_restarts
        try:
            await self.operator.run(stop=stop, leader_election=True)
        finally:
            await client.close()

    def restart(self) -> None:
        """Stop this operator (releasing its Lease) and start a fresh one with no memory of the old."""
        self.stop()
        self.operator = None
        self._fresh()
        self.start()
