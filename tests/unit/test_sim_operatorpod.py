"""The operator pod program's pure parts: the container's flags and where its endpoints listen."""

from __future__ import annotations

import pytest

from gpu_operator.sim.programs.agents import agent_registry
from gpu_operator.sim.programs.context import ProgramExit
from gpu_operator.sim.programs.operatorpod import OperatorFlags, parse_flags, pod_address
from gpu_operator.sim.programs.programs import parse_command

CHART_ARGS = ("--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--log-level=info")


def test_the_charts_command_names_the_registered_operator_program() -> None:
    parsed = parse_command(command=["gpu-operator", "operator"], args=list(CHART_ARGS))
    assert parsed == ("operator", CHART_ARGS)
    spec = agent_registry().get(parsed[0])
    assert spec is not None
    assert not spec.threaded  # runs in the simulator's loop, like the agents


def test_flags_of_the_chart_with_the_namespace_from_the_env() -> None:
    flags = parse_flags(argv=CHART_ARGS, env={"OPERATOR_NAMESPACE": "gpu-operator"})
    assert flags == OperatorFlags(namespace="gpu-operator")


def test_flags_in_both_spellings_and_the_namespace_flag_first() -> None:
    argv = ["--no-leader-elect", "--metrics-bind-address", "127.0.0.1:9", "--namespace=ops", "--log-level", "debug"]
    flags = parse_flags(argv=argv, env={"OPERATOR_NAMESPACE": "ignored"})
    assert flags == OperatorFlags(
        namespace="ops", leader_elect=False, metrics_bind_address="127.0.0.1:9", log_level="debug"
    )


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ((), {}, "Missing option '--namespace'"),
        (("--zap-devel",), {"OPERATOR_NAMESPACE": "n"}, "No such option: --zap-devel"),
        (("--log-level",), {"OPERATOR_NAMESPACE": "n"}, "requires an argument"),
        (("--log-level=loud",), {"OPERATOR_NAMESPACE": "n"}, "Invalid value for '--log-level'"),
    ],
)
def test_usage_errors_exit_2(argv: tuple[str, ...], env: dict[str, str], message: str) -> None:
    with pytest.raises(ProgramExit) as caught:
        parse_flags(argv=argv, env=env)
    assert caught.value.code == 2
    assert message in caught.value.message


def test_all_addresses_become_the_pods_loopback_address() -> None:
    env = {"GPU_OPERATOR_BIND_ADDRESS": "127.64.0.3"}
    assert pod_address(":8080", env=env) == "127.64.0.3:8080"
    assert pod_address("0.0.0.0:8081", env=env) == "127.64.0.3:8081"
    assert pod_address("127.0.0.1:8081", env=env) == "127.0.0.1:8081"
    assert pod_address(":8080", env={}) == "127.0.0.1:8080"
