"""Fixtures of the chaos tier: a control plane of its own (its API server and etcd are stopped and
started by the tests, so the integration tier's shared one is never touched), simulated GPU nodes on
it, and the operator as a real process.

* ``chaos_cluster`` (session): etcd, kube-apiserver, controller-manager and scheduler.
* ``chaos_sim`` (session): a simulator with the operand agents the driver's readiness chain needs.
* ``operators``: ``operators()`` starts ``gpu-operator operator`` processes in the test's namespace
  (``kubeconfig=`` another way to the API server, such as ``watchproxy``'s); all are stopped, and
  the test's ClusterPolicy deleted, after the test.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.standins import programs as standin_programs
from tests.chaos.harness import TRANSIENT, OperatorProcess

OperatorFactory = Callable[..., OperatorProcess]
READINESS_CHAIN = ("toolkit", "device-plugin", "validator", "driver-manager", "driver")


@pytest.fixture(scope="session")
def chaos_cluster() -> Iterator[LocalCluster]:
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        pytest.fail(f"the chaos tier needs the Kubernetes binaries (`make kube-bin`): {error}", pytrace=False)
    with LocalCluster(binaries=binaries, name="gpu-operator-chaos") as cluster:
        with cluster.client(field_manager="gpu-operator-tests") as client:
            install_crds(client=client)
        yield cluster


@pytest.fixture(scope="session")
def chaos_sim(chaos_cluster: LocalCluster) -> Iterator[Simulator]:
    access = ClusterAccess.from_kubeconfig(chaos_cluster.kubeconfig_path)
    with Simulator(access=access, name_prefix="chaos") as sim:
        for name, program in standin_programs().items():  # what NVIDIA's images run on simulated nodes
            sim.registry.register_program(name, program)
        registry = agent_registry()
        for name in READINESS_CHAIN:
            spec = registry.get(name)
            assert spec is not None
            sim.registry.register_program(name, spec.entrypoint)
        yield sim


@pytest.fixture
def client(chaos_cluster: LocalCluster) -> Iterator[Client]:
    kube = chaos_cluster.client(field_manager="gpu-operator-tests")
    try:
        yield kube
    finally:
        kube.close()


@pytest.fixture
def namespace(client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "chaos-" + request.node.name.lower().replace("_", "-")[5:30].strip("-") + f"-{secrets.token_hex(3)}"
    client.create(Namespace(metadata=ObjectMeta(name=name)))
    wait_for(lambda: client.get(ServiceAccount, "default", namespace=name), timeout=30,
             describe=f"serviceaccount {name}/default", retry_on=(ApiError,))  # fmt: skip
    try:
        yield name
    finally:
        client.delete(Namespace, name)


@pytest.fixture
def nodes(chaos_sim: Simulator) -> Iterator[Callable[[int], list[str]]]:
    added: list[str] = []

    def make(count: int) -> list[str]:
        names = sorted(chaos_sim.add_nodes(f"pcie-l4:{count}"))
        added.extend(names)
        return names

    try:
        yield make
    finally:
        chaos_sim.remove_nodes(added)


@pytest.fixture
def operators(chaos_cluster: LocalCluster, client: Client, namespace: str, tmp_path: Path) -> Iterator[OperatorFactory]:
    started: list[OperatorProcess] = []

    def make(*, name: str = "operator", kubeconfig: Path | None = None, args: tuple[str, ...] = ()) -> OperatorProcess:
        process = OperatorProcess(kubeconfig=kubeconfig or chaos_cluster.kubeconfig_path, namespace=namespace,
                                  log_dir=tmp_path, name=name, args=args)  # fmt: skip
        started.append(process.start())
        return process

    try:
        yield make
    finally:
        for process in started:
            process.stop()
        # The control plane may just have come back: deleting the policy is retried, never skipped.
        listed = wait_for(lambda: [list(client.list(ClusterPolicyResource))], timeout=60,
                          describe="the ClusterPolicies", retry_on=TRANSIENT)  # fmt: skip
        for obj in listed[0]:
            client.delete(ClusterPolicyResource, str(obj.metadata.name))  # type: ignore[union-attr]
