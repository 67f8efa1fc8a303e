"""``NicNodePolicy`` (``mellanox.com/v1alpha1``, cluster-scoped, short names ``nicnode``, ``nnp``).

The OFED driver and the device plugins for one pool of NIC nodes (heterogeneous clusters: another
driver version or plugin config per pool). It carries only the OFED, RDMA and SR-IOV sections, and
no ``global``: every image names its repository and version. Rules one object can answer are here
(a non-empty ``nodeSelector``, images resolvable, the name short enough for the DaemonSet names and
labels derived from it); overlap with other NicNodePolicies and sections also set in the
NicClusterPolicy are checked by the reconciler, which rejects the policy naming the nodes.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, ObjectMeta, Rule, Toleration, opt
from gpu_operator.api.k8srules import Annotations, Labels
from gpu_operator.api.network.components import (
    OFEDDriverSpec,
    PolicyStatus,
    RdmaSharedDevicePluginSpec,
    SriovDevicePluginSpec,
)
from gpu_operator.api.network.imagespec import image_source_rules

#: Upstream's limit: the name is part of DaemonSet names and label values (63 characters at most).
MAX_NAME_LENGTH = 30
IMAGE_SECTIONS = ("ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin")


class NicNodePolicySpec(ApiModel):
    """The NIC driver and device plugins of the nodes a selector picks."""

    rules = (
        Rule(
            cel="size(self.nodeSelector) > 0",
            message="must select nodes: a NicNodePolicy applies to the nodes its nodeSelector matches",
            check=lambda s: bool(s.node_selector),
            field_path=".nodeSelector",
        ),
        *image_source_rules(IMAGE_SECTIONS, global_field=None),
    )

    node_selector: Labels = Field(description="Labels of the nodes this policy applies to (required).")
    ofed_driver: OFEDDriverSpec | None = opt(description="The DOCA-OFED driver container for these nodes.")
    rdma_shared_device_plugin: RdmaSharedDevicePluginSpec | None = opt(
        description="The RDMA shared device plugin for these nodes."
    )
    sriov_device_plugin: SriovDevicePluginSpec | None = opt(
        description="The SR-IOV network device plugin for these nodes."
    )
    labels: Labels | None = opt(description="Labels added to the policy's pods.")
    annotations: Annotations | None = opt(description="Annotations added to the policy's pods.")
    tolerations: list[Toleration] | None = opt(description="Tolerations of the policy's pods.")


class NicNodePolicyStatus(PolicyStatus):
    """The observed state of a NicNodePolicy."""


def _name_short_enough(policy: NicNodePolicy) -> bool:
    return len(policy.metadata.name) <= MAX_NAME_LENGTH


class NicNodePolicy(ApiModel):
    """NIC driver and device plugins for one pool of nodes."""

    crd_plural: ClassVar[str] = "nicnodepolicies"
    rules = (
        Rule(
            cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
            message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters"
            " (it is part of the names and labels of the policy's DaemonSets)",
            check=_name_short_enough,
        ),
    )

    api_version: Literal["mellanox.com/v1alpha1"] = Field(default="mellanox.com/v1alpha1", alias="apiVersion")
    kind: Literal["NicNodePolicy"] = "NicNodePolicy"
    metadata: ObjectMeta
    spec: NicNodePolicySpec = Field(description="The desired state of the pool's NICs.")
    status: NicNodePolicyStatus | None = None


__all__ = ["NicNodePolicy", "NicNodePolicySpec", "NicNodePolicyStatus"]
