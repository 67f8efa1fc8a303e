"""The operator for integration tests: its asyncio loop in a thread of the test process.

* ``operator``: installs the CRDs and runs :class:`OperatorThread` (leader election on) against the
  session's control plane with the test's namespace as the operator namespace; ClusterPolicies and
  NVIDIADrivers are deleted after the test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from lightkube import AsyncClient, Client, KubeConfig

from gpu_operator.kube.api import ClusterPolicyResource, NVIDIADriverResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings


class OperatorThread:
    """The operator's asyncio loop in a thread, as in its own process; ``restart()`` replaces the process."""

    def __init__(self, *, cluster: LocalCluster, namespace: str, max_driver_restarts: int | None = None) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.max_driver_restarts = max_driver_restarts
        self.operator: Operator | None = None
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            client = AsyncClient(
                config=KubeConfig.from_file(self.cluster.kubeconfig_path), field_manager="gpu-operator"
            )
            self.operator = Operator(client=client, namespace=self.namespace, settings=OperatorSettings())
            if self.max_driver_restarts is not None:
                self.operator.max_driver_restarts = self.max_driver_restarts
            try:
                await self.operator.run(stop=self.stop, leader_election=True)
            finally:
                await client.close()

        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(main())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()  # an unclosed loop leaks its self-pipe sockets into a later test's teardown

    def start(self) -> None:
        self.thread.start()

    def shutdown(self) -> None:
        if not self.thread.is_alive():  # stopped already (a test may stop it before its ``with`` ends)
            return
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)

    def restart(self) -> None:
        """Stop this operator (releasing its Lease) and start a fresh one with no memory of the old."""
        self.shutdown()
        self.operator = None
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.start()

    def __enter__(self) -> OperatorThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


@pytest.fixture
def operator(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[OperatorThread]:
    install_crds(client=client)
    with OperatorThread(cluster=local_cluster, namespace=namespace) as op:
        yield op
    for resource in (ClusterPolicyResource, NVIDIADriverResource):
        for obj in client.list(resource):
            client.delete(resource, str(obj.metadata.name))  # type: ignore[union-attr]
