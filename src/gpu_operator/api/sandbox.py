"""ClusterPolicy sections for sandboxed (VM) workloads: vGPU, VFIO, sandbox device plugins, Kata, CC.

Split from :mod:`gpu_operator.api.clusterpolicy` (which re-exports them) to keep each module small.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, HostPath, ObjectName, opt
from gpu_operator.api.components import Component, ConfigMapRef, DriverManager
from gpu_operator.api.k8srules import DNSSubdomain, ImageReference, Labels


class SandboxWorkloadsSpec(ApiModel):
    """GPU passthrough and vGPU for virtual machines."""

    enabled: bool | None = opt(description="Support sandboxed (VM) workloads (default false).")
    default_workload: Literal["container", "vm-passthrough", "vm-vgpu"] = Field(
        default="container", description="Workload type of nodes without nvidia.com/gpu.workload.config."
    )
    mode: Literal["kubevirt", "kata"] = Field(default="kubevirt", description="Sandbox runtime.")


class VGPUManagerSpec(Component):
    """The vGPU host manager operand."""

    driver_manager: DriverManager | None = opt(description="The driver manager init step.")
    kernel_module_config: ConfigMapRef | None = opt(description="ConfigMap of kernel module parameters.")


class VGPUDeviceManagerConfig(ApiModel):
    """vGPU device configurations."""

    name: ObjectName | None = opt(description="ConfigMap of vGPU device configurations.")
    default: str = Field(default="default", description="Configuration applied to nodes that ask for none.")


class VGPUDeviceManagerSpec(Component):
    """The vGPU device manager operand."""

    config: VGPUDeviceManagerConfig | None = opt(description="vGPU device configurations.")


class VFIOManagerSpec(Component):
    """The vfio-pci manager operand."""

    driver_manager: DriverManager | None = opt(description="The driver manager init step.")


class SandboxDevicePluginSpec(Component):
    """A device plugin for sandboxed workloads."""


class KataArtifacts(ApiModel):
    """Where a Kata runtime class's artifacts are pulled from."""

    url: ImageReference = Field(description="OCI reference of the artifacts.", min_length=1)
    pull_secret: ObjectName | None = opt(description="Secret for pulling the artifacts.")


class KataRuntimeClass(ApiModel):
    """A Kata runtime class the (deprecated) kata manager would create."""

    name: DNSSubdomain = Field(description="Name of the RuntimeClass.")
    node_selector: Labels | None = opt(description="Nodes the runtime class applies to.")
    artifacts: KataArtifacts = Field(description="Artifacts of the runtime class.")


class KataManagerConfig(ApiModel):
    """Configuration of the deprecated kata manager."""

    artifacts_dir: HostPath = Field(
        default="/opt/nvidia-gpu-operator/artifacts/runtimeclasses", description="Host directory of the artifacts."
    )
    runtime_classes: list[KataRuntimeClass] | None = opt(description="Runtime classes to create.")


class KataManagerSpec(Component):
    """Deprecated: accepted with upstream's schema and, as upstream does, never deployed."""

    config: KataManagerConfig | None = opt(description="Deprecated configuration, ignored.")


class CCManagerSpec(Component):
    """The confidential-computing manager operand."""

    default_mode: Literal["on", "off", "devtools"] | None = opt(description="Confidential computing mode.")
