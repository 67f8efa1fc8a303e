"""Fixtures of the integration tier: one real local control plane per test session.

* ``local_cluster`` (session): etcd + kube-apiserver + kube-controller-manager + kube-scheduler, started once.
  Missing binaries are a failure with instructions, never a skip.
* ``client``: a lightkube ``Client`` authenticated as the cluster admin.
* ``namespace``: a fresh namespace per test (its ``default`` service account already exists), deleted after.
* ``fake_node``: a factory registering Ready, heart-beating fake Nodes (no kubelet), removed after the test.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.fakenode import FakeNode
from gpu_operator.localcluster.waiting import wait_for

FakeNodeFactory = Callable[..., FakeNode]
TEST_LABEL = "gpu-operator.test/owned"


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """The session's control plane."""
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        pytest.fail(
            "the integration tests need the Kubernetes binaries (run `make kube-bin` and export "
            f"GPU_OPERATOR_KUBE_BIN_DIR=$(bash hack/build-kube.sh)): {error}",
            pytrace=False,
        )
    with LocalCluster(binaries=binaries) as cluster:
        yield cluster


@pytest.fixture
def client(local_cluster: LocalCluster) -> Iterator[Client]:
    """An admin lightkube client with field manager ``gpu-operator-tests``."""
    kube = local_cluster.client(field_manager="gpu-operator-tests")
    try:
        yield kube
    finally:
        kube.close()


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{stem or 't'}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, with its default service account in place."""
    name = _namespace_name(request.node.name)
    client.create(Namespace(metadata=ObjectMeta(name=name, labels={TEST_LABEL: "true"})))

    def default_sa() -> bool:
        client.get(ServiceAccount, "default", namespace=name)
        return True

    # Pods are rejected until the service-account controller has created "default".
    wait_for(default_sa, timeout=30, describe=f"serviceaccount {name}/default", retry_on=(ApiError,))
    try:
        yield name
    finally:
        client.delete(Namespace, name)


@pytest.fixture
def fake_node(local_cluster: LocalCluster) -> Iterator[FakeNodeFactory]:
    """``fake_node(name=None, labels=None, capacity=None)`` registers a Ready node kept fresh in the background."""
    started: list[FakeNode] = []

    def make(
        *,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
    ) -> FakeNode:
        node = FakeNode(
            client_factory=local_cluster.client,
            name=name or f"fake-node-{secrets.token_hex(3)}",
            labels=labels,
            capacity=capacity,
        )
        started.append(node.start())
        return node

    try:
        yield make
    finally:
        for node in reversed(started):
            node.stop()


# Simulated GPU nodes: ``simulator``, ``sim_nodes``, ``sim_program`` (see tests/integration/conftest_sim.py).
# The operator in a thread: ``operator`` (see tests/integration/conftest_operator.py).
from tests.integration.conftest_operator import operator  # noqa: E402, F401
from tests.integration.conftest_sim import sim_nodes, sim_program, simulator  # noqa: E402, F401
