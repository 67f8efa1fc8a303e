"""The operator for integration tests: its asyncio loop in a thread of the test process.

* ``operator``: installs the CRDs and runs :class:`OperatorThread` (leader election on) against the
  session's control plane with the test's namespace as the operator namespace; ClusterPolicies and
  NVIDIADrivers are deleted after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube import Client

from gpu_operator.kube.api import ClusterPolicyResource, NVIDIADriverResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.reconcile.operator import OperatorThread as InProcessOperator


class OperatorThread(InProcessOperator):
    """The shared in-process operator on the session's control plane; ``restart()`` replaces the process."""

    def __init__(self, *, cluster: LocalCluster, namespace: str, max_driver_restarts: int | None = None) -> None:
        self.cluster = cluster
        super().__init__(
            kubeconfig=cluster.kubeconfig_path, namespace=namespace, max_driver_restarts=max_driver_restarts
        )

    def shutdown(self) -> None:
        self.stop()


@pytest.fixture
def operator(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[OperatorThread]:
    install_crds(client=client)
    with OperatorThread(cluster=local_cluster, namespace=namespace) as op:
        yield op
    for resource in (ClusterPolicyResource, NVIDIADriverResource):
        for obj in client.list(resource):
            client.delete(resource, str(obj.metadata.name))  # type: ignore[union-attr]
