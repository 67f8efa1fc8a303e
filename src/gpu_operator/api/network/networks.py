"""The network kinds: ``MacvlanNetwork``, ``HostDeviceNetwork``, ``IPoIBNetwork`` (``mellanox.com/v1alpha1``).

Each is cluster-scoped and renders one NetworkAttachmentDefinition (``k8s.cni.cncf.io/v1``) named
after it in ``networkNamespace``, whose CNI config embeds the ``ipam`` JSON and, for macvlan and
host-device, the ``metaPlugins`` chained after the main plugin. Those strings are checked offline
(CEL cannot parse JSON); the HostDeviceNetwork's ``resourceName`` follows upstream's webhook pattern.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, ObjectMeta, Rule, opt, section
from gpu_operator.api.k8srules import DNSLabel, Int32, InterfaceName
from gpu_operator.api.network.components import AppliedState
from gpu_operator.api.network.jsonconfig import is_json_object, is_plugin_sequence

#: Upstream's webhook pattern, plus the ``nvidia.com/`` prefix its renderer adds when missing.
RESOURCE_PREFIX = "nvidia.com/"
RESOURCE_NAME_PATTERN = r"^(nvidia\.com/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
NetworkState = Literal["notReady", "ready", "error"]

_IPAM_JSON = Rule(
    cel=None,
    message='must be a JSON object (the CNI ipam section, e.g. {"type": "nv-ipam", "poolName": "pool"})',
    check=lambda spec: is_json_object(spec.ipam),
    field_path=".ipam",
)
_META_PLUGINS_JSON = Rule(
    cel=None,
    message='must be comma-separated JSON objects with a "type" each, without enclosing brackets',
    check=lambda spec: is_plugin_sequence(spec.meta_plugins),
    field_path=".metaPlugins",
)
_NAMESPACE = "Namespace of the NetworkAttachmentDefinition."
_IPAM = "The CNI ipam configuration as a JSON string."
_META = "CNI plugin objects chained after the main plugin: comma-separated JSON, no brackets."


class MacvlanNetworkSpec(ApiModel):
    """A macvlan secondary network on a host interface."""

    rules = (_IPAM_JSON, _META_PLUGINS_JSON)

    network_namespace: DNSLabel = Field(default="default", description=_NAMESPACE)
    master: InterfaceName | None = opt(description="Host interface to enslave; default: the default-route interface.")
    mode: Literal["bridge", "private", "vepa", "passthru"] | None = opt(description="macvlan mode.")
    mtu: Int32 | None = opt(ge=0, description="MTU of the interface; 0: the master's.")
    ipam: str | None = opt(description=_IPAM)
    meta_plugins: str | None = opt(description=_META)


class HostDeviceNetworkSpec(ApiModel):
    """A network that moves a host device (an SR-IOV VF, typically) into the pod."""

    rules = (_IPAM_JSON, _META_PLUGINS_JSON)

    network_namespace: DNSLabel = Field(default="default", description=_NAMESPACE)
    resource_name: str = Field(
        pattern=RESOURCE_NAME_PATTERN,
        description="Device plugin resource the pods request, e.g. hostdev (nvidia.com/ is added when missing).",
    )
    ipam: str | None = opt(description=_IPAM)
    meta_plugins: str | None = opt(description=_META)


class IPoIBNetworkSpec(ApiModel):
    """An IP-over-InfiniBand network on a host IB interface."""

    rules = (_IPAM_JSON,)

    network_namespace: DNSLabel = Field(default="default", description=_NAMESPACE)
    master: InterfaceName | None = opt(description="Host IPoIB interface; default: the default-route interface.")
    ipam: str | None = opt(description=_IPAM)


class MacvlanNetworkStatus(ApiModel):
    """The observed state of a MacvlanNetwork."""

    state: NetworkState = Field(description="ready, notReady or error.")
    macvlan_network_attachment_def: str | None = opt(description="The NetworkAttachmentDefinition rendered.")
    reason: str | None = opt(description="Why the network is in error.")


class HostDeviceNetworkStatus(ApiModel):
    """The observed state of a HostDeviceNetwork."""

    state: NetworkState = Field(description="ready, notReady or error.")
    host_device_network_attachment_def: str | None = opt(description="The NetworkAttachmentDefinition rendered.")
    reason: str | None = opt(description="Why the network is in error.")
    applied_states: list[AppliedState] | None = opt(description="A finer view of the observed state.")


class IPoIBNetworkStatus(ApiModel):
    """The observed state of an IPoIBNetwork."""

    state: NetworkState = Field(description="ready, notReady or error.")
    ipoib_network_attachment_def: str | None = opt(description="The NetworkAttachmentDefinition rendered.")
    reason: str | None = opt(description="Why the network is in error.")


class MacvlanNetwork(ApiModel):
    """A macvlan secondary network (renders a NetworkAttachmentDefinition)."""

    crd_plural: ClassVar[str] = "macvlannetworks"

    api_version: Literal["mellanox.com/v1alpha1"] = Field(default="mellanox.com/v1alpha1", alias="apiVersion")
    kind: Literal["MacvlanNetwork"] = "MacvlanNetwork"
    metadata: ObjectMeta
    spec: MacvlanNetworkSpec = section(MacvlanNetworkSpec)
    status: MacvlanNetworkStatus | None = None


class HostDeviceNetwork(ApiModel):
    """A host-device secondary network (renders a NetworkAttachmentDefinition)."""

    crd_plural: ClassVar[str] = "hostdevicenetworks"

    api_version: Literal["mellanox.com/v1alpha1"] = Field(default="mellanox.com/v1alpha1", alias="apiVersion")
    kind: Literal["HostDeviceNetwork"] = "HostDeviceNetwork"
    metadata: ObjectMeta
    spec: HostDeviceNetworkSpec = Field(description="The desired state of the network.")
    status: HostDeviceNetworkStatus | None = None


class IPoIBNetwork(ApiModel):
    """An IPoIB secondary network (renders a NetworkAttachmentDefinition)."""

    crd_plural: ClassVar[str] = "ipoibnetworks"

    api_version: Literal["mellanox.com/v1alpha1"] = Field(default="mellanox.com/v1alpha1", alias="apiVersion")
    kind: Literal["IPoIBNetwork"] = "IPoIBNetwork"
    metadata: ObjectMeta
    spec: IPoIBNetworkSpec = section(IPoIBNetworkSpec)
    status: IPoIBNetworkStatus | None = None


NetworkResource = MacvlanNetwork | HostDeviceNetwork | IPoIBNetwork


def qualified_resource_name(spec: HostDeviceNetworkSpec) -> str:
    """The device resource a HostDeviceNetwork's pods request (the NAD's resourceName annotation):
    ``resourceName`` with upstream's ``nvidia.com/`` prefix added when it has none."""
    name = spec.resource_name
    return name if name.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + name


__all__ = [
    "HostDeviceNetwork",
    "HostDeviceNetworkSpec",
    "IPoIBNetwork",
    "IPoIBNetworkSpec",
    "MacvlanNetwork",
    "MacvlanNetworkSpec",
    "NetworkResource",
    "NetworkState",
    "qualified_resource_name",
]
