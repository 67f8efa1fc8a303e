"""Fixtures for tests with simulated GPU nodes (``gpu_operator.sim``) on the session's control plane.

* ``simulator`` (session): one :class:`~gpu_operator.sim.control.simulator.Simulator` on ``local_cluster``; its
  event loop, pod watch and heartbeat loop run in the background for the whole session.
* ``sim_nodes``: ``sim_nodes("dgx-h100:1,cpu-only:1", options=NodeOptions(...))`` registers Ready simulated
  nodes and returns their names; they (and the pods bound to them) are removed after the test. Requests work
  too: ``sim_nodes(nic_node_requests(4))`` (``gpu_operator.sim.shapes``) gives 4 Mellanox NIC nodes in two
  OS/kernel pools, whose network-operator containers run the stand-ins (``sim.programs.netstandins``).
* ``sim_program``: ``sim_program("name", entrypoint)`` makes ``gpu-operator agent name`` runnable for the
  duration of the test.

Load it with ``pytest_plugins`` in the root conftest or re-export the fixtures from
``tests/integration/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.kube.restclient import ClusterAccess
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.node import NodeOptions
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.programs import Program
from gpu_operator.sim.programs.standins import PROGRAM_PREFIX
from gpu_operator.sim.programs.standins import programs as standin_programs
from gpu_operator.sim.shapes import NodeRequest

#: The operand agents the operator's DaemonSets run (``gpu-operator agent NAME``), from the one table.
OPERAND_AGENTS = tuple(name for name in PROGRAMS if name != "sleep")
SimNodesFactory = Callable[..., list[str]]
SimProgramFactory = Callable[[str, Program], None]


@pytest.fixture(scope="session")
def simulator(local_cluster: LocalCluster) -> Iterator[Simulator]:
    """The session's simulator (node names start with ``simt-``), with the stand-ins for NVIDIA's images:
    a policy naming NVIDIA's images runs them wherever a test registers our agents."""
    access = ClusterAccess.from_kubeconfig(local_cluster.kubeconfig_path)
    with Simulator(access=access, name_prefix="simt") as sim:
        for name, program in standin_programs().items():
            sim.registry.register_program(name, program)
        yield sim


@pytest.fixture
def sim_nodes(simulator: Simulator) -> Iterator[SimNodesFactory]:
    """A factory registering simulated nodes for one test."""
    added: list[str] = []

    def make(spec: str | Sequence[NodeRequest], *, options: NodeOptions | None = None) -> list[str]:
        names = simulator.add_nodes(spec, options=options)
        added.extend(names)
        return names

    try:
        yield make
    finally:
        simulator.remove_nodes(added)


@pytest.fixture
def sim_program(simulator: Simulator) -> Iterator[SimProgramFactory]:
    """A factory registering programs for one test."""
    registered: list[str] = []

    def register(name: str, entrypoint: Program) -> None:
        simulator.registry.register_program(name, entrypoint)
        registered.append(name)

    try:
        yield register
    finally:
        for name in registered:
            simulator.registry.unregister_program(name)


def register_operand_agents(sim_program: SimProgramFactory) -> None:
    """Our operand agents for one test; the session simulator already has NVIDIA's stand-ins."""
    registry = agent_registry()
    assert any(n.startswith(PROGRAM_PREFIX) for n in registry.names())
    for name in OPERAND_AGENTS:
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)


def explain_pods(client: Client, namespace: str) -> str:
    """Each container of the namespace's pods, Ready or not and its state: what a failed wait shows."""
    lines = []
    for pod in client.list(Pod, namespace=namespace):
        status = pod.to_dict().get("status") or {}
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            lines.append(f"{pod.metadata.name}/{c['name']}: ready={c.get('ready')} {c.get('state')}")  # type: ignore[union-attr]
    return "\n".join(lines)
