"""The operator's node agents, and the operator itself, as simulator programs.

``gpu-operator sim up`` runs what the operator deploys: a container ``gpu-operator agent NAME`` on a
simulated node runs the same ``async def main(ctx)`` the real container runs, with the simulator's
:class:`~gpu_operator.sim.context.ProgramContext` (which provides everything
``gpu_operator.agents.runtime.AgentContext`` asks for). The Helm chart's operator pod
(``gpu-operator operator``) runs :func:`~gpu_operator.sim.operatorpod.operator_program`.
"""

from __future__ import annotations

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.drivermanager import driver as driver_program
from gpu_operator.agents.drivermanager import manager as driver_manager
from gpu_operator.agents.exporter import program as exporter
from gpu_operator.agents.gfd import program as feature_discovery
from gpu_operator.agents.migmanager import program as mig_manager
from gpu_operator.agents.nodestatus import program as node_status_exporter
from gpu_operator.agents.toolkit import program as toolkit
from gpu_operator.agents.validator import program as validator
from gpu_operator.sim.operatorpod import PROGRAM as OPERATOR_PROGRAM
from gpu_operator.sim.operatorpod import operator_program
from gpu_operator.sim.programs import ProgramRegistry, default_registry


def agent_registry() -> ProgramRegistry:
    """The built-in test programs plus every node agent, by the names ``gpu-operator agent`` accepts, and the
    operator (``gpu-operator operator``)."""
    registry = default_registry()
    registry.register_program("device-plugin", device_plugin.main)
    registry.register_program("feature-discovery", feature_discovery.main)
    registry.register_program("exporter", exporter.main)
    registry.register_program("validator", validator.main)
    registry.register_program("node-status-exporter", node_status_exporter.main)
    registry.register_program("toolkit", toolkit.main)
    registry.register_program("mig-manager", mig_manager.main)
    registry.register_program("driver-manager", driver_manager.main)
    registry.register_program("driver", driver_program.main)
    registry.register_program(OPERATOR_PROGRAM, operator_program)
    return registry
