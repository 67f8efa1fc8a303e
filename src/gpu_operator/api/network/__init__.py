"""The Network Operator's custom resources (``mellanox.com/v1alpha1``), field-compatible with NVIDIA's.

``NicClusterPolicy`` (the cluster-wide policy), ``NicNodePolicy`` (per node pool) and the network
kinds ``MacvlanNetwork``, ``HostDeviceNetwork`` and ``IPoIBNetwork``. Like :mod:`gpu_operator.api`,
pure: CRDs are generated from these models (:mod:`.crd`), documents are checked offline with field
paths (:mod:`gpu_operator.api.validation`), and the renderer reads images through :func:`image_of`.
"""

from gpu_operator.api.network.imagespec import GlobalConfig, ImageSpec, image_of
from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy, NicClusterPolicySpec
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy, NicNodePolicySpec

__all__ = [
    "GlobalConfig",
    "HostDeviceNetwork",
    "IPoIBNetwork",
    "ImageSpec",
    "MacvlanNetwork",
    "NicClusterPolicy",
    "NicClusterPolicySpec",
    "NicNodePolicy",
    "NicNodePolicySpec",
    "image_of",
]
