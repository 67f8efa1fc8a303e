"""The Network Operator's CustomResourceDefinitions (pure: models in, dicts out).

The five ``mellanox.com`` kinds and nv-ipam's namespaced ``IPPool`` (``nv-ipam.nvidia.com``) come from
their models through the shared walker (:func:`gpu_operator.api.crd.crd_manifest`); the
``NetworkAttachmentDefinition`` CRD belongs to the Network Plumbing Working Group and is written out
here as its reference definition has it (namespaced, plural ``network-attachment-definitions``, a
``config`` string, no status), so applying ours over one that Multus installed changes nothing.
``deploy/crds/`` holds the committed copies.
"""

from __future__ import annotations

from gpu_operator.api.crd import AGE_COLUMN, STATUS_COLUMN, Schema, crd_manifest
from gpu_operator.api.network import ippool
from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.names import network as names

NAD_FILE = "k8s.cni.cncf.io_networkattachmentdefinitions.yaml"
_COLUMNS = [STATUS_COLUMN, AGE_COLUMN]
#: Upstream's printer columns for IPPool.
_IPPOOL_COLUMNS = [
    {"name": "Subnet", "type": "string", "jsonPath": ".spec.subnet"},
    {"name": "Gateway", "type": "string", "jsonPath": ".spec.gateway"},
    {"name": "Block Size", "type": "integer", "jsonPath": ".spec.perNodeBlockSize"},
]


def nad_crd() -> Schema:
    """The NetworkAttachmentDefinition CRD (``k8s.cni.cncf.io/v1``) that Multus reads."""
    group, version = names.NAD_API_VERSION.split("/")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"network-attachment-definitions.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": names.NAD_KIND,
                "listKind": f"{names.NAD_KIND}List",
                "plural": "network-attachment-definitions",
                "singular": "network-attachment-definition",
                "shortNames": ["nad", "net-attach-def"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "How pods attach to a secondary network (Network Plumbing Working"
                            " Group multi-net spec).",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "description": "The desired state of the network attachment.",
                                    "properties": {
                                        "config": {
                                            "type": "string",
                                            "description": "The CNI configuration, as a JSON string.",
                                        }
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def network_crds() -> dict[str, Schema]:
    """The Network Operator's CRDs (its chart installs them), by file name."""
    group, version = names.GROUP, names.VERSION
    out = {
        f"{group}_nicclusterpolicies.yaml": crd_manifest(
            model=NicClusterPolicy, group=group, kind=names.NCP_KIND, plural="nicclusterpolicies",
            version=version, short_names=["ncp"], columns=_COLUMNS,
        ),
        f"{group}_nicnodepolicies.yaml": crd_manifest(
            model=NicNodePolicy, group=group, kind=names.NNP_KIND, plural="nicnodepolicies",
            version=version, short_names=["nicnode", "nnp"], columns=_COLUMNS,
        ),
        f"{group}_macvlannetworks.yaml": crd_manifest(
            model=MacvlanNetwork, group=group, kind=names.MACVLAN_KIND, plural="macvlannetworks",
            version=version, short_names=[], columns=_COLUMNS,
        ),
        f"{group}_hostdevicenetworks.yaml": crd_manifest(
            model=HostDeviceNetwork, group=group, kind=names.HOSTDEVICE_KIND, plural="hostdevicenetworks",
            version=version, short_names=[], columns=_COLUMNS,
        ),
        f"{group}_ipoibnetworks.yaml": crd_manifest(
            model=IPoIBNetwork, group=group, kind=names.IPOIB_KIND, plural="ipoibnetworks",
            version=version, short_names=[], columns=_COLUMNS,
        ),
    }  # fmt: skip
    out[NAD_FILE] = nad_crd()
    out[f"{ippool.GROUP}_{ippool.PLURAL}.yaml"] = crd_manifest(
        model=ippool.IPPool, group=ippool.GROUP, kind=ippool.KIND, plural=ippool.PLURAL, version=ippool.VERSION,
        short_names=[], columns=_IPPOOL_COLUMNS, scope="Namespaced",
    )  # fmt: skip
    return out
