"""Sections that NicClusterPolicy and NicNodePolicy share: the OFED driver, the two device plugins, status.

Field names, defaults and enums follow Mellanox/network-operator ``api/v1alpha1`` (26.7 line):
``terminationGracePeriodSeconds`` 300, ``upgradePolicy.maxParallelUpgrades`` 1, ``drain.enable`` true
and ``drain.timeoutSeconds`` 300. Webhook checks of upstream that one object can answer are rules here
(``safeLoad`` needs ``autoUpgrade``, the OFED version format, the device plugins' JSON ``config``);
the JSON ones are offline-only (see :mod:`gpu_operator.api.network.jsonconfig`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from gpu_operator.api.base import ApiModel, Condition, ObjectName, Rule, opt
from gpu_operator.api.corev1 import CoreEnvVar
from gpu_operator.api.k8srules import Int32, Int64, LabelSelectorText
from gpu_operator.api.network.imagespec import ImageSpec
from gpu_operator.api.network.jsonconfig import embedded_config_problem, is_json_object
from gpu_operator.api.network.rdmaconfig import parse_config as rdma_parse
from gpu_operator.api.network.sriovconfig import parse_config as sriov_parse

#: Upstream's accepted OFED versions: ``24.10-0.7.0.0-0``, ``doca3.1.0-25.07-0.6.6.0-0`` (optionally with a
#: kernel/OS suffix) or a ``sha256:`` digest.
OFED_VERSION_PATTERN = (
    r"^(sha256:[a-fA-F0-9]{64}|doca\d+\.\d+(\.\d+)?-\d+\.\d+-\d+\.\d+\.\d+\.\d+-\d+(-[\w\.\-]+)*"
    r"|\d+\.\d+-\d+(\.\d+)*(-\d+)?(-[\w\.\-]+)*)$"
)
State = Literal["ready", "notReady", "ignore", "error"]


class PodProbeSpec(ApiModel):
    """Timings of a probe of the OFED driver container."""

    initial_delay_seconds: Int32 = Field(description="Seconds after the container started before the first probe.")
    period_seconds: Int32 = Field(description="Seconds between probes.")
    failure_threshold: Int32 | None = opt(description="Consecutive failures after a success that count as failed.")
    timeout_seconds: Int32 | None = opt(description="Seconds after which a probe times out.")


class ConfigMapNameReference(ApiModel):
    """A ConfigMap in the operator namespace, by name."""

    name: ObjectName | None = opt(description="Name of the ConfigMap.")


class WaitForCompletionSpec(ApiModel):
    """Pods to let finish on a node before its driver is upgraded."""

    pod_selector: LabelSelectorText | None = opt(description="Label selector of the pods to wait for.")
    timeout_seconds: Int32 = Field(default=0, ge=0, description="Seconds to wait before giving up; 0 = forever.")


class DrainSpec(ApiModel):
    """Whether and how a node is drained before its driver is upgraded."""

    enable: bool = Field(default=True, description="Drain the node during the upgrade.")
    force: bool = Field(default=False, description="Also evict pods not managed by a controller.")
    pod_selector: LabelSelectorText | None = opt(
        description="Label selector of the pods to drain (the operator's own pod is always kept)."
    )
    timeout_seconds: Int32 = Field(default=300, ge=0, description="Seconds to wait for the drain; 0 = forever.")
    delete_empty_dir: bool = Field(default=False, description="Also evict pods using emptyDir volumes.")


class DriverUpgradePolicySpec(ApiModel):
    """Rolling OFED driver upgrades, node by node (the project's upgrade state machine, driver ``ofed``)."""

    rules = (
        Rule(
            cel="!has(self.safeLoad) || !self.safeLoad || (has(self.autoUpgrade) && self.autoUpgrade)",
            message="safeLoad requires autoUpgrade to be true",
            check=lambda p: not p.safe_load or p.auto_upgrade,
            field_path=".safeLoad",
        ),
    )

    auto_upgrade: bool = Field(default=False, description="Upgrade drivers automatically; false ignores the rest.")
    max_parallel_upgrades: Int32 = Field(default=1, ge=0, description="Nodes upgraded at once; 0 = no limit.")
    wait_for_completion: WaitForCompletionSpec | None = opt(description="Pods to wait for before the upgrade.")
    drain: DrainSpec | None = opt(description="Whether and how to drain the node before the upgrade.")
    safe_load: bool = Field(
        default=False, description="Cordon and drain the node before the new driver loads (needs autoUpgrade)."
    )


class OFEDDriverSpec(ImageSpec):
    """The DOCA-OFED driver container: loads the Mellanox kernel stack and exports its root."""

    version: str | None = opt(
        pattern=OFED_VERSION_PATTERN,
        description="Driver version, e.g. doca3.1.0-25.07-0.6.6.0-0, or a sha256:... digest; default: global.",
    )
    startup_probe: PodProbeSpec | None = opt(description="Startup probe (waits for .driver-ready).")
    liveness_probe: PodProbeSpec | None = opt(description="Liveness probe.")
    readiness_probe: PodProbeSpec | None = opt(description="Readiness probe.")
    env: list[CoreEnvVar] | None = opt(description="Environment variables of the driver container.")
    upgrade_policy: DriverUpgradePolicySpec | None = opt(description="Automatic driver upgrades.")
    cert_config: ConfigMapNameReference | None = opt(description="ConfigMap of custom TLS certificates.")
    repo_config: ConfigMapNameReference | None = opt(description="ConfigMap of custom package repositories.")
    termination_grace_period_seconds: Int64 = Field(
        default=300, ge=0, description="Seconds the driver pod gets to unload the driver on termination."
    )
    force_precompiled: bool = Field(
        default=False, description="Only use precompiled driver images; without one the OFED state is error."
    )


#: ``config`` holds one JSON object (offline only: CEL cannot parse JSON).
CONFIG_JSON_RULE = Rule(
    cel=None,
    message="must be a JSON object",
    check=lambda dp: is_json_object(dp.config),
    field_path=".config",
)


class DevicePluginSpec(ImageSpec):
    """A device plugin's image and its configuration (JSON, passed to the plugin as is)."""

    config: str | None = opt(description="The plugin's configuration as a JSON string.")
    use_cdi: bool | None = opt(description="Hand devices to containers through CDI (the runtime must support it).")


def _node_parser(parse: Callable[[str], object]) -> AfterValidator:
    """A ``config`` check by the node plugin's own parser, its message naming the field inside the JSON."""

    def check(text: str | None) -> str | None:
        problem = embedded_config_problem(text, parse=parse)
        if problem is not None:
            raise PydanticCustomError("embedded_config", "{problem}", {"problem": problem})
        return text

    return AfterValidator(check)


class RdmaSharedDevicePluginSpec(DevicePluginSpec):
    """The RDMA shared device plugin (``config``: {"configList": [{resourceName, selectors, ...}]})."""

    # ``config`` is required: upstream's plugin (and ours) refuses to start without a resource, so a policy
    # without one is refused here and in status rather than left to a crash-looping pod. The CRD keeps the
    # field optional, as upstream's does.
    rules = (
        Rule(
            cel=None,
            message="required: the plugin serves the resources of configList and refuses to start without one",
            check=lambda dp: bool(dp.config),
            field_path=".config",
        ),
    )

    config: Annotated[str | None, _node_parser(lambda text: rdma_parse(text, source="config"))] = opt(
        description="The plugin's configuration as a JSON string."
    )


class SriovDevicePluginSpec(DevicePluginSpec):
    """The SR-IOV network device plugin (``config``: {"resourceList": [{resourceName, selectors, ...}]})."""

    config: Annotated[str | None, _node_parser(lambda text: sriov_parse(text, source="config"))] = opt(
        description="The plugin's configuration as a JSON string."
    )


class AppliedState(ApiModel):
    """The observed state of one component (one state of the policy)."""

    name: str = Field(description="The state's name, e.g. state-OFED.")
    state: State = Field(description="ready, notReady, ignore or error.")
    message: str | None = opt(description="Why the component is in this state.")


class PolicyStatus(ApiModel):
    """The observed state of a NIC policy: overall state, each component's, and conditions."""

    state: State = Field(description="ready when every component is ready or ignored; ignore for an inactive policy.")
    reason: str | None = opt(description="Why the policy is in this state.")
    applied_states: list[AppliedState] | None = opt(description="Each component's state, in state order.")
    conditions: list[Condition] | None = opt(
        description="One <Component>Ready condition per configured component and the aggregate Ready."
    )
