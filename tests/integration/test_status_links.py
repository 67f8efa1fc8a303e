"""``gpu-operator status`` names the step that blocks a GPU node, for each link of the readiness chain.

One cluster, five simulated L4 nodes under one ClusterPolicy (standalone DCGM disabled, as the Helm
chart's values do): one healthy node and one node per broken link. The breaks, and what is simulated:

* driver: ``Simulator.fail_driver_install`` -- the real driver agent's install fails on that node, so the
  driver container crash-loops (no driver, nothing after it can start).
* toolkit: the ``toolkit`` program is replaced by one that, on that node only, exits 1 at once without
  writing the container runtime config or the CDI spec (standing in for a toolkit that cannot write or
  validate its config); on every other node it runs the real toolkit agent. Its container crash-loops.
* device plugin: the ``device-plugin`` program is replaced by one that, on that node only, keeps running
  but never registers with the kubelet (so it never reports Ready and the node advertises no GPUs);
  elsewhere it runs the real device plugin. The validator's ``plugin-validation`` init container waits
  for the plugin's GPUs too, and ``status`` names the cause (``device-plugin``), not the waiting validator.
* exporter: the ``exporter`` program is replaced by one that, on that node only, raises on start (so the
  exporter container crash-loops); elsewhere it runs the real exporter.

The substitutes are per simulator, not per node, hence the ``ctx.node_name`` switch inside them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import Client, codecs

from gpu_operator.cli.main import cli
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.context import ProgramContext, ProgramExit
from gpu_operator.sim.programs.programs import Program
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import OPERAND_AGENTS, SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]


def _on_node(broken: str, real: Program, substitute: Program) -> Program:
    """A program running ``substitute`` on the node ``broken`` and the real agent everywhere else."""

    async def program(ctx: ProgramContext) -> None:
        chosen = substitute if ctx.node_name == broken else real
        result = chosen(ctx)
        if result is not None:
            await result

    return program


async def _toolkit_cannot_configure(ctx: ProgramContext) -> None:
    raise ProgramExit(1, "simulated: cannot write the container runtime config")


async def _plugin_never_registers(ctx: ProgramContext) -> None:
    await ctx.stopped()  # runs, but never serves a socket nor registers with the kubelet: never Ready


async def _exporter_crashes(ctx: ProgramContext) -> None:
    raise RuntimeError("simulated: the exporter fails on start")


def _nodes(kubeconfig: str) -> dict[str, JSON]:
    shown = CliRunner().invoke(cli, ["status", "--kubeconfig", kubeconfig, "-o", "json"])
    assert shown.exit_code == 0, shown.output
    return {n["node"]: n for n in json.loads(shown.output)["nodes"]}


@pytest.mark.timeout(300)
def test_status_names_the_broken_link(
    client: Client,
    operator: OperatorThread,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    healthy, no_driver, no_toolkit, no_plugin, bad_exporter = sim_nodes("pcie-l4:5")
    registry = agent_registry()
    substitutes: dict[str, tuple[str, Program]] = {
        "toolkit": (no_toolkit, _toolkit_cannot_configure),
        "device-plugin": (no_plugin, _plugin_never_registers),
        "exporter": (bad_exporter, _exporter_crashes),
    }
    for name in OPERAND_AGENTS:
        spec = registry.get(name)
        assert spec is not None
        if name in substitutes:
            broken, substitute = substitutes[name]
            assert not spec.threaded, name  # the wrapper awaits the real agent in the simulator's loop
            sim_program(name, _on_node(broken, spec.entrypoint, substitute))
        else:
            sim_program(name, spec.entrypoint)
    simulator.fail_driver_install(no_driver)
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}}
    client.create(codecs.from_dict({**policy, "spec": {"dcgm": {"enabled": False}}}))

    # (node, the step `status` must name first, what the reason must mention)
    expected = {
        no_driver: ("driver", "simulated install failure"),
        no_toolkit: ("toolkit", "restarting failed container"),
        # The validator waits on the plugin too; the plugin is named as the cause.
        no_plugin: ("device-plugin", "not ready"),
        bad_exporter: ("exporter", "restarting failed container"),
    }
    kubeconfig = str(operator.cluster.kubeconfig_path)
    last: dict[str, JSON] = {}

    def settled() -> bool:
        last.clear()
        last.update(_nodes(kubeconfig))
        if set(last) != {healthy, *expected} or not last[healthy]["ready"]:
            return False
        return all(
            last[node]["blocking"].startswith(f"{step}: ") and reason in last[node]["blocking"]
            for node, (step, reason) in expected.items()
        )

    try:
        wait_for(settled, timeout=180, interval=2, describe="each broken link named by `gpu-operator status`")
    except Exception:
        shown = {n: (r["ready"], r["blocking"]) for n, r in last.items()}
        pytest.fail(f"status never settled as expected: {json.dumps(shown, indent=2)}")

    assert last[healthy]["blocking"] == ""
    assert all(step["done"] for step in last[healthy]["steps"])
    assert int(last[healthy]["allocatable"].get("nvidia.com/gpu", "0")) > 0
    for node, (step, _) in expected.items():
        report = last[node]
        assert not report["ready"], node
        named = next(s for s in report["steps"] if s["name"] == step)
        assert not named["done"], report
        assert named["detail"], report  # a reason, not just a name
        assert report["blocking"] == f"{step}: {named['detail']}"
    # The validation that waits on the unregistered plugin is not done either, and says what it waits on.
    validation = next(s for s in last[no_plugin]["steps"] if s["name"] == "validation")
    assert not validation["done"]
    assert "plugin-validation" in validation["detail"]
    # The last exit of a crash-looping container says why it failed.
    assert "cannot write the container runtime config" in last[no_toolkit]["blocking"]
    assert "exporter fails on start" in last[bad_exporter]["blocking"]
