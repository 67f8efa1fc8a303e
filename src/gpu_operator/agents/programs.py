"""Every node agent program by the name ``gpu-operator agent NAME`` runs it under, in one table.

The CLI runs one of them in a container; the simulator registers them all for its nodes. The names
are ``gpu_operator.render.agents.AGENTS`` (a unit test keeps the two equal), so the renderer never
deploys a command the image cannot run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import MappingProxyType

from gpu_operator.agents.deviceplugin import program as device_plugin
from gpu_operator.agents.discovery import program as gpu_discovery
from gpu_operator.agents.drivermanager import driver as driver_program
from gpu_operator.agents.drivermanager import manager as driver_manager
from gpu_operator.agents.drivermanager import peermem
from gpu_operator.agents.exporter import program as exporter
from gpu_operator.agents.gfd import program as feature_discovery
from gpu_operator.agents.migmanager import program as mig_manager
from gpu_operator.agents.mps import program as mps_control_daemon
from gpu_operator.agents.multus import program as multus
from gpu_operator.agents.nicfd import program as nic_feature_discovery
from gpu_operator.agents.nodestatus import program as node_status_exporter
from gpu_operator.agents.ofed import program as ofed_driver
from gpu_operator.agents.ofed import safeload as ofed_safe_load
from gpu_operator.agents.rdmadp import program as rdma_shared_dp
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.sriovdp import program as sriov_dp
from gpu_operator.agents.toolkit import program as toolkit
from gpu_operator.agents.validator import program as validator

Program = Callable[[AgentContext], Awaitable[None]]


async def sleep_program(ctx: AgentContext) -> None:
    """The validator DaemonSet's main container: ready, idle until stopped (upstream sleeps too)."""
    ctx.set_ready(True)
    while not await ctx.sleep(3600):
        pass


PROGRAMS: MappingProxyType[str, Program] = MappingProxyType(
    {
        "sleep": sleep_program,
        "device-plugin": device_plugin.main,
        "feature-discovery": feature_discovery.main,
        "exporter": exporter.main,
        "validator": validator.main,
        "node-status-exporter": node_status_exporter.main,
        "toolkit": toolkit.main,
        "mig-manager": mig_manager.main,
        "driver-manager": driver_manager.main,
        "driver": driver_program.main,
        "nvidia-peermem": peermem.main,
        "gpu-discovery": gpu_discovery.main,
        "mps-control-daemon": mps_control_daemon.main,
        "multus": multus.main,
        "rdma-shared-dp": rdma_shared_dp.main,
        "sriov-dp": sriov_dp.main,
        "nic-feature-discovery": nic_feature_discovery.main,
        "ofed-driver": ofed_driver.main,
        "ofed-safe-load": ofed_safe_load.main,
    }
)
