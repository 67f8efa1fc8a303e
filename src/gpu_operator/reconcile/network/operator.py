"""The network operator process: its informers, two work keys and its own Lease, on the shared runtime.

Same shape as the GPU operator (``reconcile.operator``): informers only wake keys; ``network`` runs
:func:`~gpu_operator.reconcile.network.policy.reconcile_network_once` plus the network kinds' NADs,
``ofed-upgrade`` runs the project's one upgrade state machine with driver name ``ofed``
(:func:`gpu_operator.upgrade.controller.upgrade_pass`). Both run only while this replica holds the
Lease ``12620820.mellanox.com`` (upstream's ID), and under one Supervisor: a task that dies turns
``/healthz`` red.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_operator.api.network import ippool
from gpu_operator.kube.api import Kube
from gpu_operator.kube.connect import async_client
from gpu_operator.kube.informer import JSON, Informer, watching
from gpu_operator.kube.slim import slim_node, slim_pod
from gpu_operator.kube.typed import AsyncClient
from gpu_operator.names import network as net
from gpu_operator.reconcile.network.ippools import reconcile_ippools
from gpu_operator.reconcile.network.networks import reconcile_networks
from gpu_operator.reconcile.network.policy import NetOutcome, reconcile_network_once
from gpu_operator.reconcile.process import run_operator
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE
from gpu_operator.runtime.backoff import Backoff
from gpu_operator.runtime.leader import RENEW_SECONDS, LeaderElection
from gpu_operator.runtime.loop import Loop, LoopStats, Result
from gpu_operator.runtime.supervisor import Supervisor
from gpu_operator.runtime.threads import LoopThread
from gpu_operator.upgrade.controller import UpgradeOutcome, upgrade_pass
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS

log = logging.getLogger(__name__)
IDLE_RESYNC = 60.0
SYNC_TIMEOUT = 30.0
COALESCE = 0.2
UPGRADE_COALESCE = 0.05
NETWORK, UPGRADE, LEASE = "network", "ofed-upgrade", "lease"
#: Node label keys the reconciler writes or ignores: a change of only these wakes the upgrade key alone.
_OWN_PREFIXES = (f"nvidia.com/{net.OFED_DRIVER_NAME}-driver-upgrade", net.MOFED_WAIT)


def node_view(node: JSON | None) -> tuple[Any, ...] | None:
    """What the reconciler reads from a Node: its labels (not its own ones) and taints."""
    if node is None:
        return None
    labels = node["metadata"].get("labels") or {}
    own = tuple(sorted(i for i in labels.items() if not i[0].startswith(_OWN_PREFIXES)))
    return own, repr((node.get("spec") or {}).get("taints"))


def network_informers(client: Any, *, namespace: str, wake_all: Callable[[], None],
                      wake_upgrade: Callable[[], None], ippools: bool = False) -> tuple[Informer, ...]:  # fmt: skip
    """The caches of a network operator in ``namespace``; every change wakes the keys that read it.
    ``ippools``: the IPPool CRD is installed, so nv-ipam's pools in ``namespace`` are watched too (a
    CRD installed later is read by the idle resync)."""

    def everyone(_old: JSON | None, _new: JSON | None) -> None:
        wake_all()

    def upgrade(_old: JSON | None, _new: JSON | None) -> None:
        wake_upgrade()

    def node_changed(old: JSON | None, new: JSON | None) -> None:
        if node_view(old) != node_view(new):
            wake_all()
        else:
            wake_upgrade()

    kinds = [watching(client, net.API_VERSION, kind, on_change=everyone)
             for kind in (net.NCP_KIND, net.NNP_KIND, *net.NETWORK_KINDS)]  # fmt: skip
    return (
        *kinds,
        watching(client, "v1", "Node", transform=slim_node, on_change=node_changed),
        watching(client, "apps/v1", "DaemonSet", namespace=namespace, labels={net.STATE_LABEL: None},
                 on_change=everyone),
        watching(client, "v1", "Pod", namespace=namespace, transform=slim_pod, on_change=everyone),
        # The OFED DaemonSets' revisions: how the upgrade key tells an out-of-date driver pod.
        watching(client, "apps/v1", "ControllerRevision", namespace=namespace,
                 labels={net.STATE_LABEL: net.STATE_OFED}, on_change=upgrade),
        *([watching(client, ippool.API_VERSION, ippool.KIND, namespace=namespace, on_change=everyone)]
          if ippools else []),
    )  # fmt: skip


@dataclass
class NetworkOperator:
    """Runs the network reconciler and the OFED upgrade controller while leading."""

    client: AsyncClient
    namespace: str
    on_outcome: Callable[[NetOutcome], Awaitable[None]] | None = None
    last: NetOutcome | None = None
    upgrades: UpgradeOutcome | None = None
    pod: tuple[str, str] | None = None
    kube: Kube | None = None
    supervisor: Supervisor | None = None
    max_driver_restarts: int = MAX_DRIVER_RESTARTS
    #: This operator's image (``AGENT_IMAGE``): a section naming its repository runs our agents.
    agent_image: str = DEFAULT_AGENT_IMAGE
    reconcile_stats: LoopStats = field(default_factory=LoopStats)
    upgrade_stats: LoopStats = field(default_factory=LoopStats)
    #: IPPool -> the problem last reported in an Event (``reconcile.network.ippools``).
    pool_reports: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.supervisor is None or self.supervisor.healthy

    def metric_lines(self) -> list[str]:
        return self.supervisor.metric_lines() if self.supervisor is not None else []

    def _kube(self) -> Kube:
        if self.kube is None:
            raise RuntimeError("the network operator is not running")
        return self.kube

    async def run(self, *, stop: asyncio.Event, leader_election: bool = True) -> None:
        supervisor = Supervisor(stop=asyncio.Event())
        self.supervisor = supervisor
        network = Loop(name=NETWORK, work=self._reconcile, idle=IDLE_RESYNC, coalesce=COALESCE,
                       gate_poll=RENEW_SECONDS, backoff=Backoff(), stats=self.reconcile_stats)  # fmt: skip
        upgrade = Loop(name=UPGRADE, work=self._upgrade, idle=IDLE_RESYNC, coalesce=UPGRADE_COALESCE,
                       gate_poll=RENEW_SECONDS, backoff=Backoff(), stats=self.upgrade_stats)  # fmt: skip

        def wake_all() -> None:
            network.wake.set()
            upgrade.wake.set()

        ippools = await Kube(self.client, field_manager=net.FIELD_MANAGER).crd_exists(ippool.CRD_NAME)
        informers = network_informers(self.client, namespace=self.namespace, wake_all=wake_all,
                                      wake_upgrade=upgrade.wake.set, ippools=ippools)  # fmt: skip
        kube = Kube(self.client, field_manager=net.FIELD_MANAGER, informers=informers)
        self.kube = kube
        election = LeaderElection(store=kube, namespace=self.namespace, owner_pod=self.pod, on_elected=wake_all,
                                  lease_name=net.LEASE_NAME)  # fmt: skip
        try:
            await run_operator(
                supervisor=supervisor, informers=informers, election=election if leader_election else None,
                loops=(network, upgrade), stop=stop, sync_timeout=SYNC_TIMEOUT, backoff=Backoff(),
            )  # fmt: skip
        finally:
            self.kube = None

    async def _reconcile(self) -> Result:
        kube = self._kube()
        self.last = await reconcile_network_once(kube, namespace=self.namespace, agent_image=self.agent_image)
        await reconcile_networks(kube)
        await reconcile_ippools(kube, namespace=self.namespace, agent_image=self.agent_image,
                                reported=self.pool_reports)  # fmt: skip
        if self.on_outcome is not None:
            await self.on_outcome(self.last)
        return Result(after=self.last.requeue_after)

    async def _upgrade(self) -> Result:
        self.upgrades = await upgrade_pass(
            self._kube(), namespace=self.namespace, max_driver_restarts=self.max_driver_restarts,
            driver=net.OFED_DRIVER_NAME,
        )  # fmt: skip
        return Result(after=self.upgrades.requeue_after or None)


class NetworkOperatorThread(LoopThread):
    """The network operator in a thread of this process (the demo and the tests run it so)."""

    def __init__(self, *, kubeconfig: Path, namespace: str) -> None:
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.operator: NetworkOperator | None = None
        super().__init__(name="network-operator", main=self._operate)

    async def _operate(self, stop: asyncio.Event) -> None:
        client = async_client(kubeconfig=self.kubeconfig)
        self.operator = NetworkOperator(client=client, namespace=self.namespace)
        try:
            await self.operator.run(stop=stop, leader_election=True)
        finally:
            await client.close()
