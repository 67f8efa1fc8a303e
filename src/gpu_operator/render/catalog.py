"""The operand states and their DaemonSets, as data.

``STATES`` is upstream's order (``controllers/state_manager.go``, reference §3): the reconciler walks
it front to back, and a not-ready state does not block later ones. ``OPERANDS`` holds, per DaemonSet,
the names upstream uses (DaemonSet, container, deploy label, service account) so dashboards, node
labels and scripts carry over, plus what is ours: the ``gpu-operator agent NAME`` program the
container runs and whether it reports readiness.

A state whose agent the image does not have (``render.agents``) is refused when enabled: rendered
with no objects and named in the policy's ``OperandsRefused`` condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from gpu_operator.names import keys
from gpu_operator.render.agents import EXECUTABLE

STATES = (
    # Ours: NVIDIA's operator relies on NFD to find GPU nodes; without NFD this state finds them.
    "state-gpu-discovery",
    "pre-requisites",
    "state-operator-metrics",
    "state-driver",
    "state-container-toolkit",
    "state-operator-validation",
    "state-device-plugin",
    "state-mps-control-daemon",
    "state-dcgm",
    "state-dcgm-exporter",
    "gpu-feature-discovery",
    "state-mig-manager",
    "state-node-status-exporter",
    "state-vgpu-manager",
    "state-vgpu-device-manager",
    "state-sandbox-validation",
    "state-vfio-manager",
    "state-sandbox-device-plugin",
    "state-kata-device-plugin",
    "state-kata-manager",
    "state-cc-manager",
)

DEPLOY_LABEL_PREFIX = keys.DEPLOY_PREFIX
#: The file ``gpu-operator agent`` touches when the program reports Ready (agents/host.py).
READY_FILE = "/run/gpu-operator-agent.ready"
#: The driver version installed when the policy names none (the upstream chart's default).
DEFAULT_DRIVER_VERSION = "595.91.07"
#: Agents the rendered DaemonSets name that no issue has built yet (sandbox stack, DCGM, MPS, sidecars).


@dataclass(frozen=True, kw_only=True)
class Operand:
    """One operand DaemonSet.

    ``section`` is the ClusterPolicy section holding its image and env; ``image_env`` the upstream
    override variable; ``gpu_access`` pods get the NVIDIA runtime class and see every GPU;
    ``waits_for`` is the validator component an init container runs before the operand starts
    (the ``/run/nvidia/validations`` chain); ``ready_probe`` means the agent reports readiness, so the
    container gets a readiness probe on :data:`READY_FILE`.
    """

    state: str
    section: str
    daemonset: str
    container: str
    agent: str
    deploy_label: str
    service_account: str
    image_env: str | None
    gpu_access: bool = False
    privileged: bool = True
    ready_probe: bool = False
    waits_for: str | None = None

    @property
    def node_selector(self) -> dict[str, str]:
        return {f"{DEPLOY_LABEL_PREFIX}{self.deploy_label}": "true"}

    def command(self) -> list[str]:
        return [EXECUTABLE, "agent", self.agent]


_ALL = (
    Operand(
        state="state-gpu-discovery",
        section="operator",
        daemonset="nvidia-gpu-discovery",
        container="nvidia-gpu-discovery",
        agent="gpu-discovery",
        deploy_label="gpu-discovery",  # not used: it runs on every Linux node
        service_account="nvidia-gpu-discovery",
        image_env=None,
        privileged=False,
        ready_probe=True,
    ),
    Operand(
        state="state-driver",
        section="driver",
        daemonset="nvidia-driver-daemonset",
        container="nvidia-driver-ctr",
        agent="driver",
        deploy_label="driver",
        service_account="nvidia-driver",
        image_env="DRIVER_IMAGE",
        ready_probe=True,
    ),
    Operand(
        state="state-container-toolkit",
        section="toolkit",
        daemonset="nvidia-container-toolkit-daemonset",
        container="nvidia-container-toolkit-ctr",
        agent="toolkit",
        deploy_label="container-toolkit",
        service_account="nvidia-container-toolkit",
        image_env="CONTAINER_TOOLKIT_IMAGE",
        ready_probe=True,
        waits_for="driver",
    ),
    # The validator's checks run as init containers; the main container only keeps the pod up.
    Operand(
        state="state-operator-validation",
        section="validator",
        daemonset="nvidia-operator-validator",
        container="nvidia-operator-validator",
        agent="sleep",
        deploy_label="operator-validator",
        service_account="nvidia-operator-validator",
        image_env="VALIDATOR_IMAGE",
        gpu_access=True,
        privileged=False,
    ),
    Operand(
        state="state-device-plugin",
        section="devicePlugin",
        daemonset="nvidia-device-plugin-daemonset",
        container="nvidia-device-plugin",
        agent="device-plugin",
        deploy_label="device-plugin",
        service_account="nvidia-device-plugin",
        image_env="DEVICE_PLUGIN_IMAGE",
        gpu_access=True,
        ready_probe=True,
        waits_for="toolkit",
    ),
    Operand(
        state="state-mps-control-daemon",
        section="devicePlugin",
        daemonset="nvidia-device-plugin-mps-control-daemon",
        container="mps-control-daemon-ctr",
        agent="mps-control-daemon",
        deploy_label="device-plugin",
        service_account="nvidia-mps-control-daemon",
        image_env="DEVICE_PLUGIN_IMAGE",
        gpu_access=True,
        waits_for="toolkit",
    ),
    Operand(
        state="state-dcgm",
        section="dcgm",
        daemonset="nvidia-dcgm",
        container="nvidia-dcgm-ctr",
        agent="dcgm",
        deploy_label="dcgm",
        service_account="nvidia-dcgm",
        image_env="DCGM_IMAGE",
        gpu_access=True,
        waits_for="toolkit",
    ),
    Operand(
        state="state-dcgm-exporter",
        section="dcgmExporter",
        daemonset="nvidia-dcgm-exporter",
        container="nvidia-dcgm-exporter",
        agent="exporter",
        deploy_label="dcgm-exporter",
        service_account="nvidia-dcgm-exporter",
        image_env="DCGM_EXPORTER_IMAGE",
        gpu_access=True,
        privileged=False,
        ready_probe=True,
        waits_for="toolkit",
    ),
    Operand(
        state="gpu-feature-discovery",
        section="gfd",
        daemonset="gpu-feature-discovery",
        container="gpu-feature-discovery",
        agent="feature-discovery",
        deploy_label="gpu-feature-discovery",
        service_account="nvidia-gpu-feature-discovery",
        image_env="GFD_IMAGE",
        gpu_access=True,
        ready_probe=True,
        waits_for="toolkit",
    ),
    Operand(
        state="state-mig-manager",
        section="migManager",
        daemonset="nvidia-mig-manager",
        container="nvidia-mig-manager",
        agent="mig-manager",
        deploy_label="mig-manager",
        service_account="nvidia-mig-manager",
        image_env="MIG_MANAGER_IMAGE",
        gpu_access=True,
        waits_for="toolkit",
    ),
    Operand(
        state="state-node-status-exporter",
        section="nodeStatusExporter",
        daemonset="nvidia-node-status-exporter",
        container="nvidia-node-status-exporter",
        agent="node-status-exporter",
        deploy_label="node-status-exporter",
        service_account="nvidia-node-status-exporter",
        image_env="VALIDATOR_IMAGE",
        privileged=False,
        ready_probe=True,
    ),
    Operand(
        state="state-vgpu-manager",
        section="vgpuManager",
        daemonset="nvidia-vgpu-manager-daemonset",
        container="nvidia-vgpu-manager-ctr",
        agent="vgpu-manager",
        deploy_label="vgpu-manager",
        service_account="nvidia-vgpu-manager",
        image_env="VGPU_MANAGER_IMAGE",
    ),
    Operand(
        state="state-vgpu-device-manager",
        section="vgpuDeviceManager",
        daemonset="nvidia-vgpu-device-manager",
        container="nvidia-vgpu-device-manager",
        agent="vgpu-device-manager",
        deploy_label="vgpu-device-manager",
        service_account="nvidia-vgpu-device-manager",
        image_env="VGPU_DEVICE_MANAGER_IMAGE",
    ),
    Operand(
        state="state-sandbox-validation",
        section="validator",
        daemonset="nvidia-sandbox-validator",
        container="nvidia-sandbox-validator",
        agent="sleep",
        deploy_label="sandbox-validator",
        service_account="nvidia-sandbox-validator",
        image_env="VALIDATOR_IMAGE",
        privileged=False,
    ),
    Operand(
        state="state-vfio-manager",
        section="vfioManager",
        daemonset="nvidia-vfio-manager",
        container="nvidia-vfio-manager",
        agent="vfio-manager",
        deploy_label="vfio-manager",
        service_account="nvidia-vfio-manager",
        image_env="VFIO_MANAGER_IMAGE",
    ),
    Operand(
        state="state-sandbox-device-plugin",
        section="sandboxDevicePlugin",
        daemonset="nvidia-sandbox-device-plugin-daemonset",
        container="nvidia-sandbox-device-plugin-ctr",
        agent="sandbox-device-plugin",
        deploy_label="sandbox-device-plugin",
        service_account="nvidia-sandbox-device-plugin",
        image_env="SANDBOX_DEVICE_PLUGIN_IMAGE",
    ),
    Operand(
        state="state-kata-device-plugin",
        section="kataSandboxDevicePlugin",
        daemonset="nvidia-kata-sandbox-device-plugin-daemonset",
        container="nvidia-kata-sandbox-device-plugin-ctr",
        agent="kata-sandbox-device-plugin",
        deploy_label="kata-sandbox-device-plugin",
        service_account="nvidia-kata-sandbox-device-plugin",
        image_env="KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
    ),
    Operand(
        state="state-cc-manager",
        section="ccManager",
        daemonset="nvidia-cc-manager",
        container="nvidia-cc-manager",
        agent="cc-manager",
        deploy_label="cc-manager",
        service_account="nvidia-cc-manager",
        image_env="CC_MANAGER_IMAGE",
    ),
)

#: Operand by the state that deploys it.
OPERANDS = MappingProxyType({op.state: op for op in _ALL})
#: The driver manager init container and the driver's sidecars: (container, agent, image env variable).
DRIVER_MANAGER = ("k8s-driver-manager", "driver-manager", "DRIVER_MANAGER_IMAGE")
DRIVER_SIDECARS = MappingProxyType(
    {
        "gds": ("nvidia-fs-ctr", "nvidia-fs", "GDS_IMAGE"),
        "gdrcopy": ("nvidia-gdrcopy-ctr", "gdrcopy", "GDRCOPY_IMAGE"),
    }
)
PEERMEM_SIDECAR = ("nvidia-peermem-ctr", "nvidia-peermem")


def operand(state: str) -> Operand:
    return OPERANDS[state]
