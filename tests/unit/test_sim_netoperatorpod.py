"""The network chart's operator command names the registered ``network-operator`` simulator program."""

from __future__ import annotations

from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.netoperatorpod import PROGRAM
from gpu_operator.sim.programs.operatorpod import OperatorFlags, parse_flags
from gpu_operator.sim.programs.programs import parse_command

# What deploy/helm/network-operator/templates/operator.yaml passes, with the default log level.
CHART_ARGS = ("--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--log-level=info")


def test_the_network_charts_command_names_the_registered_program() -> None:
    parsed = parse_command(command=["gpu-operator", "network-operator"], args=list(CHART_ARGS))
    assert parsed == (PROGRAM, CHART_ARGS)
    spec = agent_registry().get(PROGRAM)
    assert spec is not None
    assert not spec.threaded  # runs in the simulator's loop, like the GPU operator's pod


def test_the_network_charts_flags_parse_as_the_commands_do() -> None:
    flags = parse_flags(argv=CHART_ARGS, env={"OPERATOR_NAMESPACE": "nvidia-network-operator"})
    assert flags == OperatorFlags(namespace="nvidia-network-operator")
