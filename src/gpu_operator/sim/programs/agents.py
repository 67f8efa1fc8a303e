"""The operator's node agents, and the operators themselves, as simulator programs.

``gpu-operator sim up`` runs what the operator deploys: a container ``gpu-operator agent NAME`` on a
simulated node runs the same ``async def main(ctx)`` the real container runs, with the simulator's
:class:`~gpu_operator.sim.programs.context.ProgramContext` (which provides everything
``gpu_operator.agents.runtime.AgentContext`` asks for). The Helm chart's operator pod
(``gpu-operator operator``) runs :func:`~gpu_operator.sim.programs.operatorpod.operator_program`, the network
chart's (``gpu-operator network-operator``)
:func:`~gpu_operator.sim.programs.netoperatorpod.network_operator_program`, the GPU chart's CRD hook
Jobs (``gpu-operator crds``) :func:`~gpu_operator.sim.programs.crdhooks.crds_program`.
"""

from __future__ import annotations

from gpu_operator.agents.programs import PROGRAMS
from gpu_operator.sim.programs.crdhooks import PROGRAM as CRDS_PROGRAM
from gpu_operator.sim.programs.crdhooks import crds_program
from gpu_operator.sim.programs.netoperatorpod import PROGRAM as NETWORK_OPERATOR_PROGRAM
from gpu_operator.sim.programs.netoperatorpod import network_operator_program
from gpu_operator.sim.programs.operatorpod import PROGRAM as OPERATOR_PROGRAM
from gpu_operator.sim.programs.operatorpod import operator_program
from gpu_operator.sim.programs.programs import ProgramRegistry, default_registry
from gpu_operator.sim.programs.standins import programs as standin_programs


def agent_registry() -> ProgramRegistry:
    """The built-in test programs plus every node agent, by the names ``gpu-operator agent`` accepts, the
    operators (``gpu-operator operator``, ``gpu-operator network-operator``) and the stand-ins for NVIDIA's
    images (``standins``)."""
    registry = default_registry()
    for name, program in PROGRAMS.items():
        if name != "sleep":  # the simulator's own sleep program stays (tests stop it on purpose)
            registry.register_program(name, program)
    registry.register_program(OPERATOR_PROGRAM, operator_program)
    registry.register_program(NETWORK_OPERATOR_PROGRAM, network_operator_program)
    registry.register_program(CRDS_PROGRAM, crds_program)
    for name, standin in standin_programs().items():
        registry.register_program(name, standin)
    return registry
