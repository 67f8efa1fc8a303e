"""Sections shared by many operands: image reference, probes, config references, upgrade policy.

Field names and nesting follow NVIDIA's ``nvidia.com/v1`` types so that existing manifests parse
unchanged. ``Component`` is the shape most operand sections extend (enabled flag, image, pull
settings, resources, args, env). Next: ``clusterpolicy`` and ``nvidiadriver`` compose these.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gpu_operator.api.base import (
    ApiModel,
    EnvVar,
    IntOrPercent,
    ObjectName,
    PullPolicy,
    ResourceRequirements,
    Rule,
    opt,
)
from gpu_operator.api.k8srules import (
    DNSSubdomain,
    ImageReference,
    ImageRepository,
    ImageVersion,
    Int32,
    LabelSelectorText,
    OptionalConfigMapKey,
)

#: Which program runs in an operand's containers (our extension; docs/reference/implementations.md):
#: ``agent`` this operator's agent, ``nvidia`` NVIDIA's image as NVIDIA's operator runs it.
Implementation = Literal["agent", "nvidia"]
IMPLEMENTATION_HELP = (
    "Extension: run this operator's agent (agent) or NVIDIA's image as NVIDIA's operator runs it (nvidia). "
    "Unset: agent when the image is this operator's (or none is named), nvidia for any other image."
)


def _blank(value: str | None) -> bool:
    return value is None or value == ""


def image_triple_complete(obj: Any) -> bool:
    """Image reference rule: ``image`` alone (a full reference) or repository, image and version together."""
    repo, image, version = obj.repository, obj.image, obj.version
    if _blank(repo) and _blank(version):
        return True
    return not (_blank(repo) or _blank(image) or _blank(version))


IMAGE_RULE = Rule(
    cel=(
        "((!has(self.repository) || self.repository == '') && (!has(self.version) || self.version == ''))"
        " || (has(self.repository) && self.repository != '' && has(self.image) && self.image != ''"
        " && has(self.version) && self.version != '')"
    ),
    message="repository, image and version must be set together (or image alone as a full image reference)",
    check=image_triple_complete,
    field_path=".image",
)


class ImageRef(ApiModel):
    """Where an operand's container image comes from, and how it is pulled."""

    rules = (IMAGE_RULE,)

    repository: ImageRepository | None = opt(description="Registry and path, e.g. nvcr.io/nvidia.")
    image: ImageReference | None = opt(
        description="Image name, or a full image reference when repository and version are empty."
    )
    version: ImageVersion | None = opt(description="Image tag, or a sha256:... digest.")
    image_pull_policy: PullPolicy | None = opt(description="Pull policy (default IfNotPresent).")
    image_pull_secrets: list[ObjectName] | None = opt(
        description="Names of Secrets in the operator namespace used to pull the image."
    )


class ContainerComponent(ImageRef):
    """The fields of every operand section: its image, extra args and env, and which side runs it."""

    args: list[str] | None = opt(description="Extra arguments for the operand's main container.")
    env: list[EnvVar] | None = opt(description="Extra environment variables for the operand's main container.")
    implementation: Implementation | None = opt(description=IMPLEMENTATION_HELP)


class SidecarComponent(ContainerComponent):
    """A container added to another operand's pods (the driver's GDS and GDRCopy side-cars)."""

    enabled: bool | None = opt(description="Add this side-car (default false).")


class PodComponent(ContainerComponent):
    """An operand with pods of its own, always deployed (the validator)."""

    resources: ResourceRequirements | None = opt(description="Resource limits and requests.")
    host_network: bool | None = opt(
        description="Run the operand's pods in the host network (with ClusterFirstWithHostNet DNS)."
    )


class Component(PodComponent):
    """The fields shared by most operand sections: an operand DaemonSet that can be turned off."""

    enabled: bool | None = opt(description="Deploy this operand (each section documents its default).")


class ConfigMapRef(ApiModel):
    """A reference to a ConfigMap in the operator namespace by name."""

    name: ObjectName | None = opt(description="Name of the ConfigMap.")


class NamedConfig(ApiModel):
    """A ConfigMap of named configurations, and the one used when a node asks for none."""

    name: ObjectName | None = opt(description="Name of the ConfigMap holding the configurations.")
    default: OptionalConfigMapKey | None = opt(description="Key of the configuration used by default.")


class Probe(ApiModel):
    """Timings of a container probe."""

    initial_delay_seconds: Int32 | None = opt(description="Seconds before the first probe.", ge=0)
    timeout_seconds: Int32 | None = opt(description="Seconds after which a probe times out.", ge=1)
    period_seconds: Int32 | None = opt(description="Seconds between probes.", ge=1)
    success_threshold: Int32 | None = opt(description="Successes needed after a failure.", ge=1)
    failure_threshold: Int32 | None = opt(description="Failures before giving up.", ge=1)


class DriverManager(ImageRef):
    """The driver manager init step (k8s-driver-manager image and its environment)."""

    env: list[EnvVar] | None = opt(description="Environment of the driver manager.")
    implementation: Implementation | None = opt(description=IMPLEMENTATION_HELP)


class PodDeletion(ApiModel):
    """How GPU pods are deleted from a node before its driver is upgraded."""

    force: bool = Field(default=False, description="Also delete pods not managed by a controller.")
    timeout_seconds: Int32 = Field(default=300, ge=0, description="How long to wait for deletion (0 = forever).")
    delete_empty_dir: bool = Field(default=False, description="Also delete pods using emptyDir volumes.")


class WaitForCompletion(ApiModel):
    """Jobs to let finish on a node before upgrading its driver."""

    pod_selector: LabelSelectorText | None = opt(description="Label selector of the pods to wait for.")
    timeout_seconds: Int32 = Field(default=0, ge=0, description="How long to wait (0 = forever).")


class Drain(ApiModel):
    """Whether and how to drain a node before upgrading its driver."""

    enable: bool = Field(default=False, description="Drain the node after deleting GPU pods.")
    force: bool = Field(default=False, description="Also evict pods not managed by a controller.")
    pod_selector: LabelSelectorText | None = opt(description="Label selector limiting which pods are drained.")
    timeout_seconds: Int32 = Field(default=300, ge=0, description="How long to wait for the drain (0 = forever).")
    delete_empty_dir: bool = Field(default=False, description="Also evict pods using emptyDir volumes.")


class CanaryProbe(ApiModel):
    """Extension: a Job run on each canary node once its new driver is validated; it must succeed."""

    image: ImageReference = Field(min_length=1, description="The probe's container image.")
    image_pull_policy: PullPolicy | None = opt(description="Its pull policy (default: Kubernetes' for the tag).")
    command: list[str] | None = opt(description="Its command (default: the image's entrypoint).")
    args: list[str] | None = opt(description="Its arguments.")
    gpus: Int32 = Field(default=1, ge=0, description="nvidia.com/gpu the probe requests.")
    timeout_seconds: Int32 = Field(default=300, ge=1, description="The Job fails when it runs longer than this.")


class CanaryGates(ApiModel):
    """Extension: what a canary must show during its soak, beside the validator passing on its new driver."""

    no_new_xids: bool = Field(default=True, description="No GpuUnhealthy (XID) Event on a canary since it started.")
    exporter_ready: bool = Field(default=True, description="The GPU metrics exporter's pod is Ready on each canary.")
    probe: CanaryProbe | None = opt(description="A Job of your own that must succeed on each canary.")


class CanaryRollout(ApiModel):
    """Extension: upgrade a first wave, check it for a soak time, then go on; halt (and roll back) on a failure."""

    nodes: Int32 = Field(default=1, ge=1, description="How many nodes the first wave (the canaries) takes.")
    node_names: list[DNSSubdomain] | None = opt(description="The canary nodes by name (instead of the first by name).")
    soak_seconds: Int32 = Field(default=300, ge=0, description="How long the canaries run the new driver first.")
    timeout_seconds: Int32 = Field(
        default=1800, ge=1, description="The canaries run the new driver, validated, within this or the rollout halts."
    )
    gates: CanaryGates = Field(default_factory=CanaryGates, description="The health gates checked while soaking.")
    auto_rollback: bool = Field(default=True, description="Return the canaries to the last good driver on a failure.")


class DriverUpgradePolicy(ApiModel):
    """The rolling driver-upgrade policy (driver.upgradePolicy)."""

    auto_upgrade: bool = Field(default=False, description="Upgrade drivers automatically, node by node.")
    max_parallel_upgrades: Int32 = Field(default=1, ge=0, description="Nodes upgraded at once; 0 = unlimited.")
    max_unavailable: IntOrPercent = Field(
        default="25%",
        description="Most nodes (count or percentage of managed nodes) unavailable at once, incl. those upgrading.",
    )
    pod_deletion: PodDeletion | None = opt(description="How GPU pods are deleted before the upgrade.")
    wait_for_completion: WaitForCompletion | None = opt(description="Jobs to wait for before the upgrade.")
    drain: Drain | None = opt(description="Whether and how to drain the node before the upgrade.")


class ClusterPolicyUpgradePolicy(DriverUpgradePolicy):
    """The ClusterPolicy's driver.upgradePolicy: upstream's knobs and our canary stage."""

    canary: CanaryRollout | None = opt(
        description="Extension: a canary stage (first wave, health gates, soak, halt and roll back) for each rollout."
    )


class CanaryStatus(ApiModel):
    """Extension: where the rollout's canary stage is (written by the upgrade controller only)."""

    phase: str | None = opt(description="canary, soaking, proceeding, halted, rolling-back, rolled-back or empty.")
    nodes: list[str] | None = opt(description="The canary nodes.")
    target_version: str | None = opt(description="The driver version the rollout brings.")
    good_version: str | None = opt(description="The last good driver version (the rollback target).")
    reason: str | None = opt(description="Why the rollout halted, or what it waits for.")


class DriverUpgradeStatus(ApiModel):
    """Progress of rolling driver upgrades (written by the upgrade controller only)."""

    auto_upgrade: bool = Field(description="Whether the policy upgrades drivers automatically.")
    nodes: dict[str, int] | None = opt(description="Managed nodes per nvidia.com/gpu-driver-upgrade-state value.")
    message: str | None = opt(description="A summary: nodes upgrading, done, failed, and why.")
    canary: CanaryStatus | None = opt(description="Extension: the canary stage of the rollout, when one is set.")


class NVIDIADriverUpgradePolicy(DriverUpgradePolicy):
    """The NVIDIADriver upgrade policy: same knobs, but automatic upgrades are on by default."""

    auto_upgrade: bool = Field(default=True, description="Upgrade drivers automatically, node by node.")


class Rdma(ApiModel):
    """GPUDirect RDMA through the nvidia-peermem module."""

    enabled: bool | None = opt(description="Load nvidia-peermem (default false).")
    use_host_mofed: bool | None = opt(description="MOFED is installed on the host, not by the network operator.")
